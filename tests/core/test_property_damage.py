"""Property (issue 9): random protocol steps *and damage* to the ledger and the filesystem.

The machine of ``test_property.py`` (begin / write / pre-commit / commit / abort /
crash / recover / gc over a few epochs), plus rules that damage what lies around
the manifest, as a careless operator, a lost backup or a straggling task would:

- missing records: delete one ledger record, or a whole epoch's ledger folder;
- foreign records: copy a ``begin.json`` or ``decision.json`` of another epoch or
  attempt into an attempt folder that lacks one;
- links (local only): replace an attempt's or an epoch's staging folder by a
  symlink to a copy outside the target; hard-link a file outside into staging;
- late writes: a straggler adds a file to a decided attempt's staging, or rewrites
  one of its files with other bytes of the same size.

After every step:

(a) no silent loss: every pre-committed attempt whose staging manifest is gone was
    published, or was decided as commit and superseded by a higher published
    attempt, or was named by a WARNING "DISCARDING <txn id>" log record;
(b) every epoch readers see (``Sink.committed_files``) is, byte for byte, the files
    of the manifest the published marker names, and that attempt was decided as
    commit with that manifest digest (the marker and decision records are read
    directly; a record the test damaged is judged by what was observed before);
(c) nothing outside the target is ever modified or deleted;
(d) every verb either succeeds or raises a ``TpcError`` — any other exception (a
    library traceback) fails the property.

Damaged records legitimately make verbs refuse, so refusals are not judged beyond
(d); before any damage, ``recover`` must succeed (as in ``test_property.py``), and
``begin`` must always hand out an attempt above every one still visible (ledger,
staging folder, published marker).

Three defects the property found (a copied abort decision, a lost decision of the
published attempt, a copied ``published.json``) have deterministic regression
tests below.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import uuid

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from airflow_tpc import Sink, SinkConfig, TpcError
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import BEGIN, DECISION
from airflow_tpc.core.manifest import MANIFEST_NAME

from .helpers import local_tree

EPOCHS = ["0", "1"]
NAMESPACE = "dmg"
CRASH_POINTS = ["commit.before_decision", "commit.after_decision", "promote.before_marker",
                "promote.before_swap", "promote.after_swap", "promote.before_copy",
                "promote.before_cleanup", "commit.before_published", "abort.after_decision",
                "recover.before_abort", "recover.before_cleanup"]
RECORD_RE = re.compile(r"/epoch=([^/]+)/attempt=0*([0-9]+)/([a-z]+)\.json$")


def _commit_of(decision):
    """(txn, manifest digest) a commit decision record names; (None, None) for an abort.

    Both record versions: 1 embeds the manifest, 2 names it by digest.
    """
    if decision.get("outcome") != "commit":
        return None, None
    if "manifest" in decision:
        return decision["manifest"]["txn"], decision["manifest"]["digest"]
    return decision["txn"], decision["manifest_digest"]


class _Capture(logging.Handler):
    """Keeps the WARNING (and higher) messages airflow_tpc logs during one example."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class DamageMachine(RuleBasedStateMachine):
    target_factory = None  # set by the test: returns (target uri, options, outside path)

    # ------------------------------------------------------------------ set-up
    @initialize(mode=st.sampled_from(["move", "manifest"]),
                verify=st.sampled_from(["checksum", "size"]))
    def setup(self, mode, verify):
        uri, options, outside = self.target_factory()
        self.mode, self.verify, self.options = mode, verify, options
        self.sink = Sink(uri, NAMESPACE, storage_options=options,
                         config=SinkConfig(promotion=mode, verify=verify))
        self.storage = self.sink.storage
        self.local = self.storage.scheme == "file"
        self.outside = outside
        self.storage.put(self.storage.join(outside, "precious.parquet"), b"keep me")
        self.storage.put(self.storage.join(outside, "deep/attempt=000001/x.parquet"), b"mine")
        self.outside_before = self._outside_tree()
        self.capture = _Capture()
        logger = logging.getLogger("airflow_tpc")
        self.log_level = logger.level
        if logger.getEffectiveLevel() > logging.WARNING:
            logger.setLevel(logging.WARNING)  # the DISCARDING warnings must reach us
        logger.addHandler(self.capture)
        self.txns = []              # every transaction begun
        self.written = set()        # (epoch, attempt) a "job" wrote files for
        self.sealed = {}            # (epoch, attempt) -> (digest, {path: bytes}) at pre-commit
        self.decided = {}           # (epoch, attempt) -> digest of its commit decision
        self.accounted = set()      # sealed attempts published, superseded or reported
        self.linked = set()         # (epoch, attempt) whose staging the test moved behind a link
        self.foreign = set()        # ledger record paths whose content the test copied there
        self.lost = set()           # ledger record paths the test deleted
        self.damaged = False        # any damage done yet

    def teardown(self):
        if not hasattr(self, "sink"):
            return
        logging.getLogger("airflow_tpc").removeHandler(self.capture)
        logging.getLogger("airflow_tpc").setLevel(self.log_level)
        if self.local:
            shutil.rmtree(os.path.dirname(self.sink.layout.root), ignore_errors=True)
        else:
            self.storage.delete_prefix(self.sink.layout.root)
            self.storage.delete_prefix(self.outside)

    # ----------------------------------------------------------------- helpers
    def _verb(self, fn):
        """Run a verb: (result, None) | (None, the TpcError) | (None, "crash"); (d)."""
        try:
            return fn(), None
        except InjectedCrash:
            return None, "crash"
        except TpcError as exc:
            return None, exc
        except Exception as exc:  # a library traceback is a defect
            raise AssertionError(f"a verb raised {type(exc).__name__}, not a TpcError: "
                                 f"{exc!r}") from exc

    def _outside_tree(self):
        if not self.local:
            return {o.path: self.storage.read_bytes(o.path)
                    for o in self.storage.list(self.outside)}
        return local_tree(self.outside)

    def _through_link(self, path):
        """True if any folder from the target root (or, for staging beside the target,
        from its staging base) down to ``path`` is a symlink."""
        if not self.local:
            return False
        root = self.sink.layout.root.rstrip("/")
        if not path.startswith(root + "/"):
            root = self.sink.layout.staging_base.rstrip("/")
        current = root
        for part in path[len(root):].strip("/").split("/"):
            current = os.path.join(current, part)
            if os.path.islink(current):
                return True
        return False

    def _staging(self, epoch, attempt):
        return self.sink.layout.staging(epoch, attempt)

    def _read_manifest(self, epoch, attempt):
        path = self.storage.join(self._staging(epoch, attempt), MANIFEST_NAME)
        try:
            return self.storage.read_bytes(path)
        except TpcError:
            return None

    def _marker(self, epoch):
        raw = self.storage.read_bytes(self.sink.layout.marker(epoch))
        return None if raw is None else json.loads(raw)

    def _ledger_records(self, kind=None):
        out = []
        for info in self.storage.list(self.sink.layout.ledger_root):
            m = RECORD_RE.search(info.path)
            if m and (kind is None or m.group(3) == kind):
                out.append((info.path, m.group(1), int(m.group(2)), m.group(3)))
        return sorted(out)

    def _observe_decisions(self):
        """Remember every commit decision the protocol wrote (before damage can hide it)."""
        for epoch, attempt in {(t.epoch, t.attempt) for t in self.txns}:
            path = self.sink.layout.record(epoch, attempt, DECISION)
            if path in self.foreign or (epoch, attempt) in self.decided:
                continue
            raw = self.storage.read_bytes(path)
            if raw is None:
                continue
            txn, digest = _commit_of(json.loads(raw))
            if txn is None:
                continue
            assert (txn["epoch"], txn["attempt"]) == (epoch, attempt)
            assert (epoch, attempt) in self.sealed, f"{epoch}/{attempt} decided, never sealed"
            assert digest == self.sealed[(epoch, attempt)][0], \
                f"{epoch}/{attempt} was decided with a manifest other than the one it sealed"
            self.decided[(epoch, attempt)] = digest

    # ------------------------------------------------------------------ verbs
    def _evidence(self, epoch):
        """Attempts of ``epoch`` visible anywhere: ledger, staging folders, marker.

        A staging folder the test replaced by a symlink is not counted: airflow-tpc
        never lists through links, and an attempt number handed out again there is
        harmless (every verb refuses its linked staging).
        """
        seen = {a for _, e, a, _ in self._ledger_records() if e == epoch}
        parent = os.path.dirname(self._staging(epoch, 1))
        seen |= {int(n[len("attempt="):]) for n in self.storage.list_dirs(parent)
                 if re.fullmatch(r"attempt=[0-9]{6,}", n)}
        marker = self._marker(epoch)
        return max(seen | {marker["attempt"] if marker else 0})

    @rule(epoch=st.sampled_from(EPOCHS))
    def begin(self, epoch):
        self._begin(epoch)

    def _begin(self, epoch):
        highest = self._evidence(epoch)
        txn, _ = self._verb(lambda: self.sink.begin(epoch))
        self._last_begun = txn
        if txn is None:
            return
        assert txn.attempt > highest, \
            f"begin of epoch {epoch} got attempt {txn.attempt}; attempt {highest} is visible"
        key = (txn.epoch, txn.attempt)
        # A number may come back only when every trace of its first holder is gone
        # (ledger records, staging folder, marker): forget that holder.
        assert key not in self.sealed or key in self.accounted or key in self.linked
        self.txns = [t for t in self.txns if (t.epoch, t.attempt) != key]
        for known in (self.sealed, self.decided):
            known.pop(key, None)
        for known in (self.written, self.accounted, self.linked):
            known.discard(key)
        for kind in (BEGIN, DECISION):  # whatever is at these paths now is the new holder's
            self.foreign.discard(self.sink.layout.record(epoch, txn.attempt, kind))
        self.txns.append(txn)

    def _write(self, txn, n):
        key = (txn.epoch, txn.attempt)
        staging = self._staging(*key)
        if key in self.written or self._through_link(staging):
            return  # one write per attempt, like one Spark job; never through a link
        self.written.add(key)
        for i in range(n):
            self.storage.put(self.storage.join(staging, f"part-{i}.parquet"),
                             f"{txn.epoch}/{txn.attempt}/{i}".encode())

    def _precommit(self, txn):
        manifest, _ = self._verb(lambda: self.sink.precommit(txn))
        key = (txn.epoch, txn.attempt)
        if manifest is None or key in self.sealed:
            return
        staging = self._staging(*key)
        files = {f.path: self.storage.read_bytes(self.storage.join(staging, f.path))
                 for f in manifest.files}
        self.sealed[key] = (manifest.digest, files)

    def _commit(self, txn, crash, pointer):
        sealed = self.sealed.get((txn.epoch, txn.attempt))
        digest = sealed[0] if pointer and sealed else None
        with armed(crash) if crash else contextlib.nullcontext():
            self._verb(lambda: self.sink.commit(txn, expected_digest=digest))

    @rule(data=st.data(), n=st.integers(1, 2), seal=st.booleans())
    def write(self, data, n, seal):
        """A Spark job writes an attempt's files (and pre-commits them, if ``seal``)."""
        if not self.txns:
            return
        txn = data.draw(st.sampled_from(self.txns))
        self._write(txn, n)
        if seal:
            self._precommit(txn)

    @rule(data=st.data())
    def precommit(self, data):
        if not self.txns:
            return
        self._precommit(data.draw(st.sampled_from(self.txns)))

    def _run(self, epoch, n, crash):
        self._begin(epoch)
        txn = self._last_begun
        if txn is None:
            return
        self._write(txn, n)
        self._precommit(txn)
        self._commit(txn, crash, True)

    @rule(epoch=st.sampled_from(EPOCHS), n=st.integers(1, 2),
          crash=st.one_of(st.none(), st.sampled_from(CRASH_POINTS)))
    def run(self, epoch, n, crash):
        """A whole DAG run: begin, write, pre-commit, commit (maybe crashing)."""
        self._run(epoch, n, crash)

    @rule(epoch=st.sampled_from(EPOCHS), n=st.integers(1, 2),
          crash=st.one_of(st.none(), st.sampled_from(CRASH_POINTS)))
    def run_again(self, epoch, n, crash):
        """The same: a second rule doubles the weight of whole runs among the steps."""
        self._run(epoch, n, crash)

    @rule(data=st.data(), crash=st.one_of(st.none(), st.sampled_from(CRASH_POINTS)),
          pointer=st.booleans())
    def commit(self, data, crash, pointer):
        if not self.txns:
            return
        keys = {(e, a) for (e, a) in self.sealed}
        pool = [t for t in self.txns if (t.epoch, t.attempt) in keys] or self.txns
        self._commit(data.draw(st.sampled_from(pool)), crash, pointer)

    @rule(data=st.data(), crash=st.booleans())
    def abort(self, data, crash):
        if not self.txns:
            return
        txn = data.draw(st.sampled_from(self.txns))
        with armed("abort.after_decision") if crash else contextlib.nullcontext():
            self._verb(lambda: self.sink.abort(txn))

    @rule(how=st.sampled_from(["recover", "abort_undecided", "gc"]), fresh=st.booleans(),
          crash=st.one_of(st.none(), st.sampled_from(["recover.before_abort",
                                                      "recover.before_cleanup"])))
    def recover(self, how, fresh, crash):
        """Flink's restore (by this or a freshly made sink), or only gc."""
        sink = Sink(self.sink.target, NAMESPACE, storage_options=self.options,
                    config=self.sink.config) if fresh else self.sink
        if how == "gc":
            self._verb(sink.gc)
            return
        with armed(crash) if crash else contextlib.nullcontext():
            _, err = self._verb(lambda: sink.recover(abort_undecided=how == "abort_undecided"))
        if isinstance(err, TpcError) and not self.damaged:
            raise AssertionError(f"recover failed before any damage: {err}")

    # ----------------------------------------------------------------- damage
    @rule(data=st.data(), whole_epoch=st.booleans())
    def lose_records(self, data, whole_epoch):
        """Missing records: one ledger record, or a whole epoch's ledger folder, is lost."""
        records = self._ledger_records()
        if not records:
            return
        path, epoch, attempt, kind = data.draw(st.sampled_from(records))
        lost = [p for p, e, _, _ in records if e == epoch] if whole_epoch else [path]
        self.storage.delete_files(lost)
        self.lost.update(lost)
        self.foreign.difference_update(lost)
        self.damaged = True

    @rule(data=st.data(), kind=st.sampled_from([BEGIN, DECISION]))
    def copy_foreign_record(self, data, kind):
        sources = self._ledger_records(kind)
        if not sources:
            return
        src, sepoch, sattempt, _ = data.draw(st.sampled_from(sources))
        slots = {(t.epoch, t.attempt) for t in self.txns}
        slots |= {(e, 1 + max([a for (x, a) in slots if x == e], default=0)) for e in EPOCHS}
        slots.discard((sepoch, sattempt))
        if not slots:
            return
        epoch, attempt = data.draw(st.sampled_from(sorted(slots)))
        source = json.loads(self.storage.read_bytes(src) or b"{}")
        del source  # any record, commit or abort, may be copied anywhere
        dst = self.sink.layout.record(epoch, attempt, kind)
        if self.storage.put_if_absent(dst, self.storage.read_bytes(src)):
            self.foreign.add(dst)
            self.damaged = True

    @precondition(lambda self: getattr(self, "local", False))
    @rule(data=st.data(), how=st.sampled_from(["attempt", "epoch", "_SUCCESS", "h.parquet"]))
    def link(self, data, how):
        """Links (local only): an attempt's or an epoch's staging folder replaced by a
        symlink to a copy outside the target, or a file outside hard-linked into staging."""
        if not self.txns:
            return
        txn = data.draw(st.sampled_from(self.txns))
        path = self._staging(txn.epoch, txn.attempt)
        if self._through_link(path):
            return
        if how not in ("attempt", "epoch"):
            if os.path.lexists(os.path.join(path, how)):
                return
            os.makedirs(path, exist_ok=True)
            os.link(os.path.join(self.outside, "precious.parquet"), os.path.join(path, how))
            self.damaged = True
            return
        if how == "epoch":
            path = os.path.dirname(path)
        if not os.path.isdir(path):
            return
        copy = os.path.join(self.outside, "links", uuid.uuid4().hex)
        shutil.copytree(path, copy, symlinks=True)
        with open(os.path.join(copy, "_decoy"), "wb") as fh:
            fh.write(b"outside the target")
        shutil.rmtree(path)
        os.symlink(copy, path)
        if how == "epoch":
            self.linked |= {(t.epoch, t.attempt) for t in self.txns if t.epoch == txn.epoch}
        else:
            self.linked.add((txn.epoch, txn.attempt))
        self.outside_before = self._outside_tree()
        self.damaged = True

    @rule(data=st.data(), rewrite=st.booleans())
    def late_write(self, data, rewrite):
        """A straggling task of a decided attempt writes into its staging."""
        self._observe_decisions()
        decided = sorted(k for k in self.decided)
        if not decided:
            return
        epoch, attempt = data.draw(st.sampled_from(decided))
        staging = self._staging(epoch, attempt)
        if self._through_link(staging):
            return
        if not rewrite:
            self.storage.put(self.storage.join(staging, f"late-{uuid.uuid4().hex[:6]}.parquet"),
                             b"straggler")
            self.damaged = True
            return
        marker = self._marker(epoch)
        if self.verify == "size" or (self.mode == "manifest" and marker is not None
                                     and marker["attempt"] == attempt):
            # verify="size" trusts sizes by contract; a manifest-mode epoch's published
            # files *are* its staging: rewriting them is not something any check can see.
            return
        files = self.sealed[(epoch, attempt)][1]
        if not files:
            return
        rel = data.draw(st.sampled_from(sorted(files)))
        self.storage.put(self.storage.join(staging, rel), b"X" * len(files[rel]))
        self.damaged = True

    # ------------------------------------------------------------- invariants
    @invariant()
    def no_loss_and_published_is_the_winning_manifest(self):
        if not hasattr(self, "sink"):
            return
        self._observe_decisions()
        markers = {}
        for epoch in EPOCHS:
            markers[epoch] = self._marker(epoch)
        self._check_published(markers)
        self._check_no_silent_loss(markers)
        assert self._outside_tree() == self.outside_before, "a file outside the target changed"

    def _check_published(self, markers):
        """(b): readers see exactly the files of the manifest the marker names."""
        seen = self.sink.committed_files()
        for epoch in EPOCHS:
            marker = markers[epoch]
            assert (epoch in seen) == (marker is not None)
            if marker is None:
                continue
            if self.local:
                assert not os.path.islink(self.sink.layout.published_dir(epoch))
            key = (epoch, marker["attempt"])
            digest = marker["manifest_digest"]
            assert self.decided.get(key) == digest, \
                f"epoch {epoch} shows attempt {key[1]} ({digest}), not a decided commit " \
                f"(decided: {self.decided})"
            decision_path = self.sink.layout.record(epoch, key[1], DECISION)
            raw = self.storage.read_bytes(decision_path)
            if decision_path not in self.foreign and not (raw is None and
                                                          decision_path in self.lost):
                assert raw is not None, f"decision of published {key} vanished"
                doc = json.loads(raw)
                assert _commit_of(doc)[1] == digest, \
                    f"published {key} is decided {doc.get('outcome')} in the ledger: {doc}"
            files = self.sealed[key][1]
            listed = marker["files"] if "files" in marker else self._named_files(marker)
            assert len(listed) == len(files)
            for entry, rel in zip(listed, sorted(files), strict=True):
                path = entry["path"]
                path = (path.split("://", 1)[1] if "://" in path
                        else self.storage.join(self.sink.layout.root, path))
                got = self.storage.read_bytes(path)
                assert got == files[rel], \
                    f"epoch {epoch}: {entry['path']} is {got!r}, its manifest says {files[rel]!r}"
            assert len(seen[epoch]) == len(files)

    def _named_files(self, marker):
        """A version-2 marker's files, read here without airflow-tpc's reader: the
        entries of the manifest it names (whose digest must be the marker's), relative
        to the manifest's folder."""
        named = marker["manifest"]
        path = (named.split("://", 1)[1] if "://" in named
                else self.storage.join(self.sink.layout.root, named))
        doc = json.loads(self.storage.read_bytes(path))
        assert doc["digest"] == marker["manifest_digest"], f"{named} is not the published one"
        base = named.rpartition("/")[0]
        return [{"path": f"{base}/{e['path']}"} for e in doc["files"]]

    def _check_no_silent_loss(self, markers):
        """(a): a sealed attempt whose manifest is gone was published, superseded by a
        higher published commit, or reported as DISCARDING."""
        for key, (digest, _) in self.sealed.items():
            if key in self.accounted:
                continue
            marker = markers[key[0]]
            if marker is not None and marker["attempt"] == key[1] \
                    and marker["manifest_digest"] == digest:
                self.accounted.add(key)  # published
                continue
            if key in self.linked or self._read_manifest(*key) is not None:
                continue
            if key in self.decided and marker is not None and marker["attempt"] > key[1]:
                self.accounted.add(key)  # committed, then replaced by a higher commit
                continue
            txn_id = re.escape(f"{NAMESPACE}/{key[0]}/{key[1]}")
            if any("DISCARDING" in m and re.search(txn_id + r"(?![0-9])", m)
                   for m in self.capture.messages):
                self.accounted.add(key)
                continue
            raise AssertionError(f"SILENT LOSS: pre-committed {key} ({digest}) is gone from "
                                 "staging, was never published and no WARNING named it")


# ------------------------------------------------------------------ the tests
def _settings(examples, steps):
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    derandomize=True, print_blob=True, report_multiple_bugs=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_damage_property_local():
    base = tempfile.mkdtemp()

    def factory():
        case = os.path.join(base, uuid.uuid4().hex)
        return os.path.join(case, "target"), None, os.path.join(case, "outside")

    class Local(DamageMachine):
        target_factory = staticmethod(factory)

    try:
        Local.TestCase.settings = _settings(35, 25)
        Local.TestCase().runTest()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(300)
def test_damage_property_s3(s3_options, s3_bucket):
    def factory():
        case = f"{s3_bucket}/{uuid.uuid4().hex}"
        return f"s3://{case}/target", s3_options, f"{case}/outside"

    class S3(DamageMachine):
        target_factory = staticmethod(factory)

    S3.TestCase.settings = _settings(3, 12)
    S3.TestCase().runTest()


# ------------------------------------ defects the property exposed (regression tests)
def _staged(sink, epoch, files, *, commit=False):
    txn = sink.begin(epoch)
    for rel, data in files.items():
        sink.storage.put(sink.storage.join(sink.layout.staging(epoch, txn.attempt), rel), data)
    manifest = sink.precommit(txn)
    if commit:
        sink.commit(txn, expected_digest=manifest.digest)
    return txn, manifest


def _discard_warnings(caplog, txn_id):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
            and "DISCARDING" in r.getMessage() and re.search(
                re.escape(txn_id) + r"(?![0-9])", r.getMessage())]


@pytest.mark.parametrize("verb", ["gc", "recover"])
def test_foreign_abort_decision_is_not_a_silent_discard(tmp_path, caplog, verb):
    sink = Sink(str(tmp_path / "t"), NAMESPACE)
    sink.abort(sink.begin("1"))                   # any abort decision anywhere
    txn, manifest = _staged(sink, "2", {"b.parquet": b"pre-committed"})
    sink.storage.put_if_absent(sink.layout.record("2", 1, DECISION),   # foreign record
                               sink.storage.read_bytes(sink.layout.record("1", 1, DECISION)))
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"), \
            contextlib.suppress(TpcError):
        getattr(sink, verb)()
    kept = sink.storage.read_bytes(sink.storage.join(sink.layout.staging("2", 1),
                                                     MANIFEST_NAME)) is not None
    # Expected: the sealed staging is kept (the record cannot be vouched for), or at the
    # very least its discarding is named in a WARNING.  Actual: deleted, nothing logged.
    assert kept or _discard_warnings(caplog, txn.txn_id), \
        f"{txn.txn_id} ({manifest.digest}) was deleted without a word"


@pytest.mark.parametrize("mode", ["move", "manifest"])
@pytest.mark.parametrize("how", ["abort_undecided", "superseded"])
def test_published_attempt_whose_decision_is_lost_is_never_aborted(tmp_path, mode, how):
    sink = Sink(str(tmp_path / "t"), NAMESPACE, config=SinkConfig(promotion=mode))
    _staged(sink, "1", {"a.parquet": b"published"}, commit=True)
    sink.storage.delete_files([sink.layout.record("1", 1, DECISION)])   # lost record
    if how == "superseded":
        sink.begin("1")                           # a new run begins (attempt 2)
    with contextlib.suppress(TpcError):
        sink.recover(abort_undecided=how == "abort_undecided")
    files = {e: [sink.storage.read_bytes(u.split("://", 1)[1]) for u in uris]
             for e, uris in sink.committed_files().items()}
    assert files == {"1": [b"published"]}, "the published files were deleted"
    raw = sink.storage.read_bytes(sink.layout.record("1", 1, DECISION))
    assert raw is None or json.loads(raw).get("outcome") == "commit", \
        f"attempt 1, which readers see, is now decided {json.loads(raw)}"


def test_foreign_published_record_never_loses_a_decided_commit(tmp_path):
    sink = Sink(str(tmp_path / "t"), NAMESPACE)
    _staged(sink, "1", {"a.parquet": b"one"}, commit=True)
    txn, manifest = _staged(sink, "2", {"b.parquet": b"decided"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)   # decided, not promoted
    sink.storage.put_if_absent(sink.layout.record("2", 1, "published"),   # foreign record
                               sink.storage.read_bytes(sink.layout.record("1", 1, "published")))
    with contextlib.suppress(TpcError):
        sink.recover()
    staged = sink.storage.read_bytes(sink.storage.join(sink.layout.staging("2", 1),
                                                       "b.parquet"))
    # Expected: epoch 2 is published, or recover refuses and keeps its staging.
    assert "2" in sink.committed_files() or staged == b"decided", \
        "the decided commit of epoch 2 is neither published nor kept"
