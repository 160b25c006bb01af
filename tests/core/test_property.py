"""Property: random begin/write/pre-commit/commit/abort/crash/recover over several epochs.

After every step the read-committed view of each epoch is exactly the output of
one attempt that was decided as committed (never a mix, never an undecided or
aborted attempt), and after every recover it is the highest decided one.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from airflow_tpc import (
    FencedError,
    InvalidState,
    ManifestError,
    Sink,
    SinkConfig,
    TpcError,
)
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.records import CommitDecision

from .helpers import assert_invariant, committed_contents, write_staged

EPOCHS = ["0", "1", "2"]
CRASH_POINTS = ["commit.before_decision", "commit.after_decision", "promote.before_marker",
                "promote.before_swap", "promote.after_swap", "promote.before_copy",
                "promote.before_cleanup", "commit.before_published", "abort.after_decision"]


def content(txn, n):
    return sorted(f"{txn.epoch}/{txn.attempt}/{i}".encode() for i in range(n))


class EpochMachine(RuleBasedStateMachine):
    target_factory = None  # set by the test: returns (uri, options)

    @initialize(mode=st.sampled_from(["move", "manifest"]))
    def setup(self, mode):
        uri, options = self.target_factory()
        self.sink = Sink(uri, "prop", storage_options=options, config=SinkConfig(promotion=mode))
        self.txns = []          # every transaction begun
        self.written = {}       # txn_id -> expected file contents
        self.decided = {}       # epoch -> {attempt: contents} decided as commit
        self.aborted = set()

    def _decided_now(self, txn):
        rec = self.sink.ledger.read(txn.epoch, txn.attempt, "decision")
        return isinstance(rec, CommitDecision)

    @rule(epoch=st.sampled_from(EPOCHS))
    def begin(self, epoch):
        self.txns.append(self.sink.begin(epoch))

    @rule(data=st.data(), n=st.integers(1, 3))
    def write(self, data, n):
        if not self.txns:
            return
        txn = data.draw(st.sampled_from(self.txns))
        files = {f"part-{i}-{uuid.uuid4().hex[:4]}.parquet": f"{txn.epoch}/{txn.attempt}/{i}"
                 .encode() for i in range(n)}
        if txn.txn_id in self.written or self.sink.read_manifest(txn) is not None:
            # One write per attempt, before its pre-commit, like one Spark job.  A
            # straggler writing after the seal is refused by the roll-forward's
            # re-verification (recover then fails loudly until staging is restored):
            # tests/core/test_hardening.py covers that, not this model.
            return
        write_staged(self.sink, txn, files)
        self.written[txn.txn_id] = sorted(files.values())

    @rule(data=st.data())
    def precommit(self, data):
        if not self.txns:
            return
        txn = data.draw(st.sampled_from(self.txns))
        with contextlib.suppress(FencedError, ManifestError):
            self.sink.precommit(txn)

    @rule(data=st.data(), crash=st.one_of(st.none(), st.sampled_from(CRASH_POINTS)))
    def commit(self, data, crash):
        if not self.txns:
            return
        txn = data.draw(st.sampled_from(self.txns))
        try:
            if crash:
                with armed(crash):
                    self.sink.commit(txn)
            else:
                self.sink.commit(txn)
        except (InjectedCrash, FencedError, InvalidState, ManifestError):
            pass
        if self._decided_now(txn):
            # What was staged when the decision was first made: files written into a
            # decided attempt's staging later are not part of its manifest.
            self.decided.setdefault(txn.epoch, {}).setdefault(
                txn.attempt, self.written.get(txn.txn_id, []))

    @rule(data=st.data(), crash=st.booleans())
    def abort(self, data, crash):
        if not self.txns:
            return
        txn = data.draw(st.sampled_from(self.txns))
        try:
            if crash:
                with armed("abort.after_decision"):
                    self.sink.abort(txn)
            else:
                self.sink.abort(txn)
            self.aborted.add(txn.txn_id)
        except InjectedCrash:
            self.aborted.add(txn.txn_id)
        except InvalidState:
            assert self._decided_now(txn)

    @rule()
    def recover(self):
        try:
            self.sink.recover()
        except TpcError as exc:  # pragma: no cover - would be a bug
            raise AssertionError(f"recover failed: {exc}") from exc
        expected = {e: atts[max(atts)] for e, atts in self.decided.items()}
        assert_invariant(self.sink, expected)

    @invariant()
    def read_committed_is_one_decided_attempt(self):
        if not hasattr(self, "sink"):
            return
        seen = committed_contents(self.sink)
        for epoch, files in seen.items():
            options = list(self.decided.get(epoch, {}).values())
            assert files in options, f"epoch {epoch} shows {files}, not a decided commit"
        for txn_id in self.aborted:
            ep, att = txn_id.split("/")[1:]
            assert self.decided.get(ep, {}).get(int(att)) is None or not any(
                f.startswith(f"{ep}/{att}/".encode()) for f in seen.get(ep, []))

    def teardown(self):
        if hasattr(self, "sink"):
            self.sink.storage.delete_prefix(self.sink.layout.root)


def test_random_protocol_sequences_local():
    base = tempfile.mkdtemp()

    class Local(EpochMachine):
        target_factory = staticmethod(lambda: (f"{base}/{uuid.uuid4().hex}", None))

    try:
        Local.TestCase.settings = settings(max_examples=40, stateful_step_count=25,
                                           deadline=None,
                                           suppress_health_check=list(HealthCheck))
        Local.TestCase().runTest()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(900)
def test_random_protocol_sequences_s3(s3_options, s3_bucket):
    class S3(EpochMachine):
        target_factory = staticmethod(
            lambda: (f"s3://{s3_bucket}/{uuid.uuid4().hex}", s3_options))

    S3.TestCase.settings = settings(max_examples=6, stateful_step_count=15, deadline=None,
                                    suppress_health_check=list(HealthCheck))
    S3.TestCase().runTest()
