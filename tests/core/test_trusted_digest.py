"""A commit skips decoding a manifest's entries only for a digest a full validation
recorded (issue 32 §2, PROTOCOL §3.4.11).

A manifest rewritten after pre-commit with its digest recomputed, committed with that
digest, used to be decided and published whenever staging was as sealed (the entries
were never decoded), and every reader of the epoch then failed.  Now only the digest
named by the attempt's ``validated.json`` (written by the pre-commit that sealed the
manifest, or the sensor that read it in full) is trusted; any other is decoded and
checked before the decision, so each rewrite below is refused with one ManifestError
and nothing changes — ledger, staging and target, byte for byte.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_tpc import LedgerError, ManifestError, Sink, TxnState
from airflow_tpc.core import manifest as manifest_mod
from airflow_tpc.core import manifest_codec
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.manifest import (
    MANIFEST_NAME,
    Manifest,
    SealedEntries,
    canonical_json,
    digest_of,
)
from airflow_tpc.core.records import VALIDATED, Validated
from airflow_tpc.core.sink_trust import record_validated

from .helpers import committed_contents, full_tree, stage

FILES = {"a.parquet": b"new A", "c/d.parquet": b"new D", "c/e.parquet": b"new E!"}


def _entry(i: int, **changes):
    def change(files: list[dict]) -> list[dict]:
        files[i] = {**files[i], **changes}
        return files
    return change


def _negative(files: list[dict]) -> list[dict]:
    """A size of -1, the bytes given to another entry: the totals still add up (and
    equal what staging holds), so only decoding the entries finds it."""
    files[1]["size"] += files[0]["size"] + 1
    files[0]["size"] = -1
    return files


def _unknown_key(files: list[dict]) -> list[dict]:
    files[0]["owner"] = "me"
    return files


# name -> (what the rewrite does to the file entries, what the refusal says)
REWRITES = {
    "escapes staging": (_entry(0, path="a/../../x.parquet"), "escapes staging"),
    "absolute": (_entry(0, path="/etc/x.parquet"), "absolute"),
    "url": (_entry(0, path="s3://other/x.parquet"), "absolute"),
    "backslash": (_entry(0, path="c\\x.parquet"), "absolute or not a plain"),
    "dot": (_entry(0, path="./a.parquet"), "escapes staging or is not normalised"),
    "tpc area": (_entry(0, path="_tpc/ledger/x.parquet"), "hidden component"),
    "double slash": (_entry(0, path="c//x.parquet"), "not normalised"),
    "nul": (_entry(0, path="a\x00.parquet"), "absolute or not a plain"),
    "trailing slash": (_entry(0, path="c/"), "not normalised"),
    "dotdot": (_entry(0, path=".."), "escapes staging"),
    "negative size": (_negative, "invalid size -1"),
    "unknown key": (_unknown_key, "malformed file entry"),
}


def rewrite(sink: Sink, txn, manifest: Manifest, change) -> str:
    """Rewrite the sealed manifest as canonical JSON with ``change`` applied to its
    entries and the digest recomputed (what a writer after pre-commit could do); its
    new digest."""
    doc = manifest.to_dict()
    doc["files"] = change([dict(f) for f in doc["files"]])
    doc.pop("digest")
    doc["digest"] = digest_of(doc)
    seal = sink.layout.sealed(txn.epoch, txn.attempt)
    sink.storage.put(sink.storage.join(seal, MANIFEST_NAME), canonical_json(doc))
    return doc["digest"]


@pytest.fixture()
def decodes(monkeypatch):
    """How many times a manifest's file entries were decoded and checked: a spy on the
    one function every full decode goes through (a plain parse and a deferred one)."""
    calls: list[int] = []
    real = manifest_codec.entries_of

    def spy(raw, where):
        calls.append(len(raw))
        return real(raw, where)

    monkeypatch.setattr(manifest_codec, "entries_of", spy)
    monkeypatch.setattr(manifest_mod, "entries_of", spy)
    return calls


def _undecoded(manifest) -> bool:
    return isinstance(manifest.files, SealedEntries) and manifest.files._files is None


def _epoch_in_progress(store):
    """Epoch 1 published (attempt 1); attempt 2 staged and pre-committed."""
    target, options = store
    sink = Sink(target, "trust", storage_options=options)
    txn1, _ = stage(sink, "1", {"a.parquet": b"published A", "b.parquet": b"published B"})
    sink.commit(txn1)
    txn2, manifest = stage(sink, "1", FILES)
    return sink, txn2, manifest


@pytest.mark.parametrize("kind", list(REWRITES))
def test_a_manifest_rewritten_after_precommit_is_refused_and_nothing_changes(store, kind):
    sink, txn, manifest = _epoch_in_progress(store)
    change, match = REWRITES[kind]
    digest = rewrite(sink, txn, manifest, change)
    before = full_tree(sink)  # ledger, staging and target, byte for byte
    with pytest.raises(ManifestError, match=match) as info:
        sink.commit(txn, expected_digest=digest)
    assert str(info.value).startswith(f"manifest of {txn.txn_id}")
    assert full_tree(sink) == before
    assert sink.describe("1")[-1].state is TxnState.PRECOMMITTED
    assert committed_contents(sink) == {"1": [b"published A", b"published B"]}


def test_precommit_records_the_digest_it_sealed_and_the_commit_trusts_it(store, decodes):
    target, options = store
    sink = Sink(target, "trust", storage_options=options)
    txn, manifest = stage(sink, "1", FILES)
    record = sink.ledger.read("1", txn.attempt, VALIDATED)
    assert record == Validated(manifest.digest, record.validated_at, "precommit")
    doc = json.loads(sink.storage.read_bytes(sink.layout.record("1", txn.attempt, VALIDATED)))
    assert doc["txn_id"] == txn.txn_id and doc["staging"] == txn.staging_uri
    del decodes[:]
    result = sink.commit(txn, expected_digest=manifest.digest)
    assert result.outcome == "committed"
    if sink.storage.scheme == "file":  # staging as sealed: no entry decoded at all
        assert decodes == [] and _undecoded(result.manifest)
    assert sorted(committed_contents(sink)["1"]) == sorted(FILES.values())


def test_a_valid_manifest_replaced_after_its_record_is_decoded_in_full(tmp_path, decodes):
    """The record names the first digest (records are write-once); a valid manifest
    sealed over it, committed by its own digest, is decoded and checked, and commits."""
    sink = Sink(str(tmp_path / "t"), "trust")
    txn, manifest = stage(sink, "1", FILES)
    digest = rewrite(sink, txn, manifest, lambda files: files[::-1])  # another order
    assert digest != manifest.digest
    del decodes[:]
    result = sink.commit(txn, expected_digest=digest)
    assert result.outcome == "committed" and decodes == [3]
    assert sink.ledger.read("1", txn.attempt, VALIDATED).manifest_digest == manifest.digest


def test_no_record_a_target_of_the_previous_build_is_decoded_in_full(tmp_path, decodes):
    """A pre-commit of the previous build wrote no validated.json: its digest is checked
    in full before the decision, then committed as before."""
    sink = Sink(str(tmp_path / "t"), "trust")
    txn, manifest = stage(sink, "1", FILES)
    os.unlink(sink.layout.record("1", txn.attempt, VALIDATED))
    del decodes[:]
    result = sink.commit(txn, expected_digest=manifest.digest)
    assert result.outcome == "committed" and decodes == [3]
    assert not _undecoded(result.manifest)


def test_a_crash_between_the_seal_and_its_record(tmp_path, decodes):
    """Crashed after sealing, before recording: the job's retried pre-commit returns the
    sealed manifest (decoded in full) and records it; the commit then trusts it."""
    sink = Sink(str(tmp_path / "t"), "trust")
    txn = sink.begin("1")
    for rel, data in FILES.items():
        sink.storage.put(sink.storage.join(sink.layout.staging("1", txn.attempt), rel), data)
    with armed("precommit.before_validated"), pytest.raises(InjectedCrash):
        sink.precommit(txn)
    assert VALIDATED not in sink.ledger.scan("1")["1"][txn.attempt].kinds
    manifest = sink.precommit(txn)
    assert sink.ledger.read("1", txn.attempt, VALIDATED).manifest_digest == manifest.digest
    del decodes[:]
    result = sink.commit(txn, expected_digest=manifest.digest)
    assert result.outcome == "committed" and decodes == [] and _undecoded(result.manifest)


def test_a_damaged_record_refuses_the_commit_and_changes_nothing(tmp_path):
    """validated.json copied from another attempt (it names attempt 1 under attempt 2)
    is a damaged ledger, like any record that lies about its place (§3.1)."""
    sink = Sink(str(tmp_path / "t"), "trust")
    first, _ = stage(sink, "1", {"a.parquet": b"A"})
    txn, manifest = stage(sink, "1", FILES)
    copied = sink.storage.read_bytes(sink.layout.record("1", first.attempt, VALIDATED))
    path = sink.layout.record("1", txn.attempt, VALIDATED)
    os.unlink(path)
    sink.storage.put(path, copied)
    before = full_tree(sink)
    with pytest.raises(LedgerError, match="attempt 1, but lies under epoch '1' attempt 2"):
        sink.commit(txn, expected_digest=manifest.digest)
    assert full_tree(sink) == before


def test_the_record_is_written_once_and_another_digest_is_left_alone(tmp_path, caplog):
    sink = Sink(str(tmp_path / "t"), "trust")
    txn, manifest = stage(sink, "1", FILES)
    path = sink.layout.record("1", txn.attempt, VALIDATED)
    first = sink.storage.read_bytes(path)
    assert record_validated(sink.ledger, manifest, "sensor") is False  # already there
    rewrite(sink, txn, manifest, lambda files: files[::-1])
    other = sink.read_manifest(txn)
    assert record_validated(sink.ledger, other, "sensor") is False
    assert sink.storage.read_bytes(path) == first
    assert "changed after pre-commit" in caplog.text


def test_a_precommit_refuses_what_a_reader_would_refuse_before_sealing(tmp_path):
    """The pre-commit vouches for the bytes it seals, so it validates them as a reader
    would: a caller's malformed checksum is refused there, with nothing sealed."""
    sink = Sink(str(tmp_path / "t"), "trust")
    txn, _ = stage(sink, "1", FILES, precommit=False)
    with pytest.raises(ManifestError, match="invalid checksum"):
        sink.precommit(txn, checksums={"a.parquet": "crc32:not one"})
    assert sink.read_manifest(txn) is None
    assert VALIDATED not in sink.ledger.scan("1")["1"][txn.attempt].kinds


# ------------------------------------------------------------------ group members
def _group(tmp_path):
    from airflow_tpc.group import Group

    sinks = {n: Sink(str(tmp_path / n), "trust") for n in ("events", "daily")}
    group = Group(sinks, str(tmp_path / "_tpc_groups" / "etl"))
    gtxn = group.begin("1")
    for name, sink in sinks.items():
        for rel, data in FILES.items():
            sink.storage.put(sink.storage.join(sink.layout.staging(
                "1", gtxn.member(name).attempt), rel), data + name.encode())
    return group, gtxn, group.precommit(gtxn)


def _group_tree(tmp_path) -> dict:
    from .helpers import local_tree

    return local_tree(str(tmp_path))


def test_group_members_take_the_shortcut_for_recorded_digests(tmp_path, decodes):
    group, gtxn, manifests = _group(tmp_path)
    for name, sink in group.sinks.items():
        record = sink.ledger.read("1", gtxn.member(name).attempt, VALIDATED)
        assert record.manifest_digest == manifests[name].digest and record.by == "precommit"
    del decodes[:]
    result = group.commit(gtxn, expected_digests={n: m.digest for n, m in manifests.items()})
    assert result.outcome == "committed" and decodes == []


@pytest.mark.parametrize("kind", ["escapes staging", "negative size", "unknown key"])
def test_a_group_member_rewritten_after_precommit_is_refused(tmp_path, kind):
    """Members commit through the same checks: one rewritten member manifest refuses
    the group's commit before its decision, and nothing of any member or of the group
    folder changes."""
    group, gtxn, manifests = _group(tmp_path)
    sink = group.sinks["daily"]
    change, match = REWRITES[kind]
    digests = {n: m.digest for n, m in manifests.items()}
    digests["daily"] = rewrite(sink, gtxn.member("daily"), manifests["daily"], change)
    before = _group_tree(tmp_path)
    with pytest.raises(ManifestError, match=match):
        group.commit(gtxn, expected_digests=digests)
    assert _group_tree(tmp_path) == before
