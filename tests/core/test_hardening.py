"""Issue 9: the edges around the manifest.

Damaged or foreign ledger records, a lost ledger, staging that changes between a
decision and its roll-forward, links around staging, the namespace claim, bad
input, and pre-committed data thrown away.  Each test names the check it covers;
every refusal is also asserted to change nothing, ledger and staging included,
byte for byte (:func:`full_tree`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest

from airflow_tpc import (
    LedgerError,
    ManifestError,
    NamespaceConflict,
    Sink,
    SinkConfig,
    StorageError,
    TpcError,
    TxnState,
    UnsupportedStorage,
)
from airflow_tpc.cli import main as cli
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import BEGIN, DECISION
from airflow_tpc.core.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES

from .helpers import committed_contents, full_tree, stage, write_staged


def _sink(store, namespace="hard", **config):
    target, options = store
    return Sink(target, namespace, storage_options=options, config=SinkConfig(**config))


def _record(sink, epoch, attempt, kind):
    return sink.layout.record(epoch, attempt, kind)


def _decided_not_promoted(sink, epoch, files):
    """An attempt whose commit was decided, then the committer died (lost notification)."""
    txn, manifest = stage(sink, epoch, files)
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    return txn, manifest


# ---------------------------------------------------------------- 1. records checked
def test_decision_copied_from_another_epoch_is_refused_everywhere(store, capsys):
    sink = _sink(store)
    done, _ = stage(sink, "1", {"a.parquet": b"epoch one"})
    sink.commit(done)
    pending, _ = stage(sink, "2", {"b.parquet": b"epoch two, pre-committed"})
    # The attack: epoch 1's decision copied into epoch 2's attempt folder.
    sink.storage.put(_record(sink, "2", 1, DECISION),
                     sink.storage.read_bytes(_record(sink, "1", 1, DECISION)))
    before = full_tree(sink)

    with pytest.raises(TpcError, match="damaged ledger records") as info:
        sink.recover(abort_undecided=True)
    assert "lies under epoch '2'" in str(info.value)
    assert full_tree(sink) == before  # epoch 2's pre-committed staging is still there
    with pytest.raises(LedgerError, match="epoch '1' attempt 1, but lies under epoch '2'"):
        _sink(store).commit(pending)
    assert full_tree(sink) == before
    assert cli(["recover", sink.target, *_endpoint(store)]) == 2
    assert "lies under epoch '2'" in capsys.readouterr().err
    assert full_tree(sink) == before
    assert committed_contents(sink) == {"1": [b"epoch one"]}


def _endpoint(store):
    options = store[1]
    return ["--endpoint-url", options["endpoint_url"]] if options else []


def test_decision_from_another_target_or_namespace_is_refused(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard")
    other = Sink(str(tmp_path / "other"), "hard")
    stage(sink, "1", {"a.parquet": b"mine"})
    theirs, _ = stage(other, "1", {"a.parquet": b"theirs"})
    other.commit(theirs)
    decision = json.loads(other.storage.read_bytes(_record(other, "1", 1, DECISION)))
    sink.storage.put(_record(sink, "1", 1, DECISION), json.dumps(decision).encode())
    before = full_tree(sink)
    with pytest.raises(LedgerError, match="target"):
        sink.commit(sink.transaction("1", 1))
    assert full_tree(sink) == before

    # Same epoch, attempt, target and staging, but the manifest names another namespace.
    from airflow_tpc.core.manifest import digest_of

    own = Sink(str(tmp_path / "t2"), "hard")
    txn, manifest = stage(own, "1", {"a.parquet": b"x"})
    doc = manifest.to_dict()
    doc["txn"]["namespace"] = "intruder"
    doc["txn_id"] = "intruder/1/1"
    doc["digest"] = digest_of(doc)
    own.storage.put(_record(own, "1", 1, DECISION), json.dumps(
        {"outcome": "commit", "txn_id": "intruder/1/1", "decided_at": 1.0, "mode": "move",
         "verify": "checksum", "forced": False, "manifest": doc}).encode())
    before = full_tree(own)
    with pytest.raises(LedgerError, match="namespace 'intruder'"):
        own.commit(txn)
    assert full_tree(own) == before


def test_begin_record_and_marker_must_belong_where_they_lie(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard")
    one, _ = stage(sink, "1", {"a.parquet": b"one"})
    sink.commit(one)
    stage(sink, "2", {"b.parquet": b"two"})
    sink.storage.put(_record(sink, "2", 1, BEGIN),
                     sink.storage.read_bytes(_record(sink, "1", 1, BEGIN)))
    with pytest.raises(LedgerError, match="names epoch '1' attempt 1"):
        sink.transaction("2", 1)
    # A marker copied into another epoch would serve epoch 1's files as epoch 3's.
    os.makedirs(sink.layout.published_dir("3"))
    shutil.copy(sink.layout.marker("1"), sink.layout.marker("3"))
    with pytest.raises(LedgerError, match="is for epoch '1', not '3'"):
        sink.committed_files()


# ------------------------------------------------------------------ 2. lost ledger
def test_lost_ledger_never_reuses_an_attempt(store):
    sink = _sink(store)
    old, _ = stage(sink, "1", {"a.parquet": b"old"})
    sink.commit(old)
    sink.storage.delete_prefix(sink.layout.ledger_root)  # the whole ledger is gone

    txn, manifest = stage(sink, "1", {"a.parquet": b"new"})
    assert txn.attempt == 2  # above the published marker's attempt 1
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    assert committed_contents(sink) == {"1": [b"new"]}


def test_lost_epoch_ledger_counts_staged_attempts(store):
    sink = _sink(store)
    stage(sink, "1", {"a.parquet": b"attempt 1, pre-committed"})
    stage(sink, "1", {"a.parquet": b"attempt 2, pre-committed"})
    sink.storage.delete_prefix(sink.storage.join(sink.layout.ledger_root, "epoch=1"))
    txn = sink.begin("1")
    assert txn.attempt == 3  # staging still holds attempts 1 and 2


def test_already_published_is_decided_by_digest_not_attempt_number(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard")
    old, _ = stage(sink, "1", {"a.parquet": b"old"})
    sink.commit(old)
    begin = sink.storage.read_bytes(_record(sink, "1", 1, BEGIN))
    sink.storage.delete_prefix(sink.layout.ledger_root)
    # A begin of attempt 1 appears again (a restored backup, another implementation):
    sink.storage.put_if_absent(_record(sink, "1", 1, BEGIN), begin)
    txn = sink.transaction("1", 1)
    write_staged(sink, txn, {"a.parquet": b"new data"})
    with pytest.raises(LedgerError, match="readers already see attempt 1"):
        sink.precommit(txn)
    # Sealed anyway (another writer, a restored staging): promotion compares digests.
    from airflow_tpc.core.manifest import FileEntry, Manifest

    staged = sink.layout.staging("1", 1)
    manifest = Manifest.build(namespace=txn.namespace, target=txn.target, epoch="1", attempt=1,
                              staging=txn.staging_uri, files=[FileEntry(
                                  "a.parquet", 8, "sha256:" + sink.storage.checksum(
                                      sink.storage.join(staged, "a.parquet"), "sha256"))])
    sink.storage.put(sink.storage.join(staged, MANIFEST_NAME), manifest.to_json_bytes())
    with pytest.raises(LedgerError, match="attempt number was reused"):
        sink.commit(txn, expected_digest=manifest.digest)
    assert committed_contents(sink) == {"1": [b"old"]}
    staged = sink.layout.staging("1", 1)
    assert sink.storage.read_bytes(sink.storage.join(staged, "a.parquet")) == b"new data"


# ------------------------------------------------------- 3. roll-forward re-verifies
TAMPERING = {
    "added": lambda s, d: s.storage.put(s.storage.join(d, "late.parquet"), b"late"),
    "rewritten": lambda s, d: s.storage.put(s.storage.join(d, "a.parquet"), b"EVIL"),
    "vanished": lambda s, d: s.storage.delete_files([s.storage.join(d, "a.parquet")]),
}


@pytest.mark.parametrize("mode", ["move", "manifest"])
@pytest.mark.parametrize("change", sorted(TAMPERING))
def test_roll_forward_refuses_staging_changed_after_decision(store, mode, change):
    sink = _sink(store, promotion=mode)
    old, _ = stage(sink, "1", {"a.parquet": b"old!"})
    sink.commit(old)
    txn, _ = _decided_not_promoted(sink, "1", {"a.parquet": b"good"})
    staging = sink.layout.staging("1", txn.attempt)
    original = sink.storage.read_bytes(sink.storage.join(staging, "a.parquet"))
    TAMPERING[change](sink, staging)  # a straggling task of the same attempt
    before = full_tree(sink)

    with pytest.raises(TpcError, match="changed after the commit was decided"):
        _sink(store, promotion=mode).recover()
    with pytest.raises(ManifestError, match="changed after the commit was decided"):
        _sink(store, promotion=mode).commit(txn)
    other, _ = stage(sink, "2", {"c.parquet": b"c"})
    with pytest.raises(ManifestError):  # a later epoch's commit finishes pending ones too
        sink.commit(other)
    assert committed_contents(sink)["1"] == [b"old!"]
    assert {k: v for k, v in full_tree(sink).items() if "epoch=2" not in k} == \
        {k: v for k, v in before.items() if "epoch=2" not in k}

    # Restored to the decided manifest, the next recover publishes it.
    sink.storage.delete_files([sink.storage.join(staging, "late.parquet")])
    sink.storage.put(sink.storage.join(staging, "a.parquet"), original)
    _sink(store, promotion=mode).recover()
    assert committed_contents(sink) == {"1": [b"good"], "2": [b"c"]}


def test_verify_size_roll_forward_still_refuses_added_files(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard", config=SinkConfig(verify="size"))
    txn, _ = _decided_not_promoted(sink, "1", {"a.parquet": b"good"})
    decision = json.loads(sink.storage.read_bytes(_record(sink, "1", 1, DECISION)))
    assert decision["verify"] == "size"
    staging = sink.layout.staging("1", 1)
    TAMPERING["added"](sink, staging)
    with pytest.raises(TpcError, match="does not list"):
        sink.recover()
    assert committed_contents(sink) == {}


# ----------------------------------------------------------------- 4. path safety
def _outside(tmp_path):
    out = tmp_path / "elsewhere"
    (out / "attempt=000001").mkdir(parents=True)
    (out / "attempt=000001" / "secret.parquet").write_bytes(b"not yours")
    (out / "precious.parquet").write_bytes(b"keep me")
    return out


def test_symlinked_attempt_directory_is_never_published(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard")
    txn = sink.begin("1")
    outside = _outside(tmp_path)
    staging = sink.layout.staging("1", 1)
    os.makedirs(os.path.dirname(staging))
    os.symlink(outside / "attempt=000001", staging)
    before = full_tree(sink, str(outside))
    with pytest.raises(StorageError, match="symbolic link"):
        sink.precommit(txn)
    assert full_tree(sink, str(outside)) == before

    # Sealed while real, swapped for a link before the commit: refused too.
    os.unlink(staging)
    write_staged(sink, txn, {"a.parquet": b"real"})
    manifest = sink.precommit(txn)
    os.rename(staging, str(tmp_path / "moved"))
    shutil.copytree(str(tmp_path / "moved"), outside / "attempt=000001", dirs_exist_ok=True)
    os.symlink(outside / "attempt=000001", staging)
    before = full_tree(sink, str(outside))
    with pytest.raises(StorageError, match="symbolic link"):
        sink.commit(txn, expected_digest=manifest.digest)
    with pytest.raises(StorageError, match="symbolic link"):
        sink.abort(txn)
    assert committed_contents(sink) == {}
    assert not os.path.islink(sink.layout.published_dir("1"))
    # Only the abort decision (and its pending-index entry) was recorded.
    def data(tree):
        return {k: v for k, v in tree.items() if "/ledger/" not in k and "/pending/" not in k}

    assert data(full_tree(sink, str(outside))) == data(before)


def test_cli_abort_never_deletes_through_a_symlinked_epoch_folder(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "hard")
    sink.begin("1")
    outside = _outside(tmp_path)
    epoch_dir = os.path.dirname(sink.layout.staging("1", 1))
    shutil.rmtree(epoch_dir, ignore_errors=True)
    os.makedirs(os.path.dirname(epoch_dir), exist_ok=True)
    os.symlink(outside, epoch_dir)
    assert cli(["abort", sink.target, "--epoch", "1"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert (outside / "attempt=000001" / "secret.parquet").read_bytes() == b"not yours"
    assert (outside / "precious.parquet").read_bytes() == b"keep me"


def test_gc_and_recover_never_delete_through_a_symlinked_staging_root(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard")
    txn, _ = stage(sink, "1", {"a.parquet": b"a"})
    sink.abort(txn)
    outside = tmp_path / "elsewhere"
    (outside / "epoch=1" / "attempt=000001").mkdir(parents=True)
    (outside / "epoch=1" / "attempt=000001" / "x.parquet").write_bytes(b"not yours")
    staging_root = sink.layout.staging_root
    shutil.rmtree(staging_root, ignore_errors=True)
    os.symlink(outside, staging_root)
    for verb in (sink.gc, sink.recover):
        with pytest.raises(StorageError, match="symbolic link"):
            verb()
    assert (outside / "epoch=1" / "attempt=000001" / "x.parquet").read_bytes() == b"not yours"


@pytest.mark.parametrize("name", ["a.parquet", "_SUCCESS"])
def test_hard_linked_staged_files_are_refused(tmp_path, name):
    sink = Sink(str(tmp_path / "t"), "hard")
    txn = sink.begin("1")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"shared bytes")
    staging = sink.layout.staging("1", 1)
    os.makedirs(staging)
    os.link(outside, os.path.join(staging, name))
    before = full_tree(sink)
    with pytest.raises(ManifestError, match="hard links"):
        sink.precommit(txn)
    assert full_tree(sink) == before


# ------------------------------------------------------------ 5. namespace binding
def test_foreign_namespace_cannot_recover_gc_or_abort(store, capsys):
    owner = _sink(store, "owner")
    txn, manifest = stage(owner, "1", {"a.parquet": b"owner's pre-committed work"})
    before = full_tree(owner)
    intruder = _sink(store, "intruder")
    for verb in (lambda: intruder.recover(abort_undecided=True), intruder.gc,
                 lambda: intruder.abort(txn)):
        with pytest.raises(NamespaceConflict, match="owned by namespace 'owner'"):
            verb()
    assert cli(["recover", owner.target, "--namespace", "intruder", "--abort-undecided",
                *_endpoint(store)]) == 2
    assert "allow-foreign-namespace" in capsys.readouterr().err
    assert full_tree(owner) == before
    assert owner.describe("1")[0].state is TxnState.PRECOMMITTED
    # Said explicitly, it is allowed (and logged).
    assert cli(["recover", owner.target, "--namespace", "intruder", "--abort-undecided",
                "--allow-foreign-namespace", *_endpoint(store)]) == 0
    assert owner.describe("1")[0].state is TxnState.ABORTED


# ---------------------------------------------------------------- 6. bad input
def test_bad_epochs_attempts_and_namespaces_are_refused(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "hard")
    txn, _ = stage(sink, "1", {"a.parquet": b"a"})
    before = full_tree(sink)
    for epoch in ("1\n", "1\n\n", " 1"):
        with pytest.raises(TpcError, match="invalid epoch"):
            sink.begin(epoch)
    for attempt in ("1\n", " 1", 0, -1, True, "0"):
        with pytest.raises(TpcError, match="invalid attempt"):
            sink.transaction("1", attempt)
    with pytest.raises(TpcError, match="invalid namespace"):
        Sink(str(tmp_path / "t"), "bad\udcffname")
    for attempt in ("0", "-1", "1\n"):
        with pytest.raises(SystemExit) as exited:
            cli(["abort", sink.target, "--epoch", "1", "--attempt", attempt])
        assert exited.value.code == 2
        assert "invalid attempt" in capsys.readouterr().err
    assert full_tree(sink) == before
    assert sink.transaction("1", "1") == txn


def test_bad_targets_are_refused(tmp_path):
    regular = tmp_path / "a-file"
    regular.write_bytes(b"x")
    cases = {f"file://otherhost{tmp_path}/t": "names host 'otherhost'",
             f"{tmp_path}/t\x00x": "NUL",
             str(regular): "not a directory",
             "s3://user:pw@bucket/t": "user part",
             "s3://bucket/t?x=1": "query"}
    for target, message in cases.items():
        with pytest.raises((UnsupportedStorage, StorageError), match=message):
            Sink(target, "hard")
    assert Sink(f"file://localhost{tmp_path}/t", "hard").target == f"file://{tmp_path}/t"


def test_staged_names_that_no_manifest_can_hold_are_refused_at_precommit(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard")
    for name, message in ((b"bad\xff.parquet", "not valid UTF-8"),
                          (b"back\\slash.parquet", "absolute or not a plain relative path")):
        txn = sink.begin(name.decode("utf-8", "surrogateescape")[:3].encode().hex())
        staging = sink.layout.staging(txn.epoch, txn.attempt)
        os.makedirs(staging)
        with open(os.path.join(os.fsencode(staging), name), "wb") as fh:
            fh.write(b"data")
        before = full_tree(sink)
        with pytest.raises(ManifestError, match=message):
            sink.precommit(txn)
        assert full_tree(sink) == before


def test_corrupt_sink_record_gives_one_clear_error(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "hard")
    stage(sink, "1", {"a.parquet": b"a"})
    with open(sink.layout.sink_record, "wb") as fh:
        fh.write(b"{corrupt")
    before = full_tree(sink)
    assert cli(["list", sink.target]) == 2
    err = capsys.readouterr().err
    assert "sink.json" in err and "corrupt" in err and "Traceback" not in err
    with pytest.raises(LedgerError, match="corrupt"):
        Sink(str(tmp_path / "t"), "hard").begin("2")
    assert full_tree(sink) == before


def test_oversized_manifest_is_refused_before_parsing(tmp_path):
    sink = Sink(str(tmp_path / "t"), "hard")
    txn, _ = stage(sink, "1", {"a.parquet": b"a"})
    path = sink.storage.join(sink.layout.staging("1", 1), MANIFEST_NAME)
    with open(path, "wb") as fh:  # sparse: a huge manifest, cheaply
        fh.truncate(MAX_MANIFEST_BYTES + 1)
    before = full_tree(sink)
    with pytest.raises(ManifestError, match="byte cap"):
        sink.commit(txn)
    assert full_tree(sink) == before


# ---------------------------------------------------- 7. discarded data is reported
def _assert_reported(caplog, txn_id, manifest):
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
             and "DISCARDING" in r.getMessage() and txn_id in r.getMessage()]
    assert lines, caplog.text
    assert f"PRE-COMMITTED ({manifest.total_files} files, {manifest.total_bytes} bytes, " \
           f"digest {manifest.digest}; files a.parquet, b.parquet" in lines[0]


@pytest.mark.parametrize("path", ["superseded-by-begin", "abort-undecided", "higher-commit"])
def test_every_discarded_precommit_is_reported(tmp_path, caplog, path):
    sink = Sink(str(tmp_path / "t"), "hard")
    txn, manifest = stage(sink, "1", {"a.parquet": b"A", "b.parquet": b"BB"})
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        if path == "superseded-by-begin":
            sink.begin("1")
            sink.recover()
        elif path == "abort-undecided":
            sink.recover(abort_undecided=True)
        else:
            higher, _ = stage(sink, "1", {"c.parquet": b"C"})
            sink.commit(higher)
    _assert_reported(caplog, txn.txn_id, manifest)
    assert sink.describe("1")[0].state is TxnState.ABORTED


def test_s3_rewrite_between_verification_and_copy_is_never_published(s3_options, s3_bucket):
    """The window inside promotion: staging verified, then a same-size rewrite before the
    server-side copy.  The copy's own ETag gives it away; nothing is published."""
    sink = Sink(f"s3://{s3_bucket}/t", "hard", storage_options=s3_options)
    old, _ = stage(sink, "1", {"a.parquet": b"old!"})
    sink.commit(old)
    txn, manifest = stage(sink, "1", {"a.parquet": b"good"})
    staged = sink.storage.join(sink.layout.staging("1", 2), "a.parquet")

    def rewrite(_name):
        sink.storage.put(staged, b"EVIL")

    with armed("promote.before_copy", rewrite), \
            pytest.raises(StorageError, match="changed after it was verified"):
        sink.commit(txn, expected_digest=manifest.digest)
    assert committed_contents(sink) == {"1": [b"old!"]}
    with pytest.raises(TpcError, match="changed after the commit was decided"):
        sink.recover()
    assert committed_contents(sink) == {"1": [b"old!"]}
    sink.storage.put(staged, b"good")  # restored: the next recover publishes it
    sink.recover()
    assert committed_contents(sink) == {"1": [b"good"]}


def test_a_new_store_without_compare_and_swap_or_lock_fails_closed(tmp_path):
    """A backend that implements only the abstract methods cannot publish: the base
    class refuses the marker's compare-and-swap and the promotion lock."""
    from airflow_tpc.storage import LocalStorage, Storage

    local = LocalStorage()

    class Minimal(Storage):
        scheme = "file"
        has_links = True
        uri = local.uri
        read_bytes = local.read_bytes
        list = local.list
        list_dirs = local.list_dirs
        iter_chunks = local.iter_chunks
        put = local.put
        put_if_absent = local.put_if_absent
        delete_prefix = local.delete_prefix
        delete_files = local.delete_files
        check_real_dirs = local.check_real_dirs

    for mode in ("move", "manifest"):
        sink = Sink(str(tmp_path / mode), "hard", storage=Minimal(),
                    config=SinkConfig(promotion=mode))
        txn, _ = stage(sink, "1", {"a.parquet": b"a"})
        with pytest.raises(UnsupportedStorage, match="promotion lock"):
            sink.commit(txn)
        assert sink.committed_files() == {}
