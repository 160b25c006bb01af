"""What ``SinkQueries`` answers about one attempt in each of its states: ``poll`` (the
question a waiting sensor asks on every poke), ``is_published`` (whether an Asset event
is owed), ``latest_transaction``, ``sealed``, ``manifest_uri`` and ``output_uri``.

Mutation testing (docs/mutation.md) let edits of these answers through: the selected
core tests ask them only on the happy path, and the Airflow layer's tests (which ask
more) are not in its test set.  A wrong answer here lets a sensor release its
downstream task before the epoch is published, or keep a fenced attempt waiting.
Real local files.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.manifest import Manifest, ManifestSummary

from .helpers import stage


def test_poll_follows_an_attempt_from_open_to_published(tmp_path):
    sink = Sink(str(tmp_path / "t"), "polls")
    assert sink.latest_transaction("0") is None

    txn, _ = stage(sink, "0", {"p.parquet": b"x"}, precommit=False)
    status = sink.poll(txn)
    assert (status.state, status.highest_attempt, status.reason, status.manifest,
            status.validated) == (TxnState.OPEN, 1, None, None, False)
    assert sink.sealed(txn) is None
    assert not sink.is_published(txn)

    manifest = sink.precommit(txn)
    status = sink.poll(txn)
    assert status.state is TxnState.PRECOMMITTED
    assert isinstance(status.manifest, Manifest) and status.manifest.digest == manifest.digest
    assert status.validated  # the pre-commit recorded its full validation
    sealed = sink.sealed(txn)  # the manifest itself while staged
    assert isinstance(sealed, Manifest) and sealed.digest == manifest.digest
    assert sink.manifest_uri(txn) == sink.storage.uri(sink.storage.join(
        sink.layout.sealed("0", 1), "_tpc_manifest.json"))

    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    status = sink.poll(txn)
    assert (status.state, status.manifest, status.reason) == (TxnState.COMMITTED, None, None)
    assert not sink.is_published(txn)  # decided, not yet promoted: no Asset event yet
    sealed = sink.sealed(txn)  # staging still there: the manifest itself
    assert isinstance(sealed, Manifest) and sealed.digest == manifest.digest

    sink.recover()
    assert sink.is_published(txn)
    summary = sink.sealed(txn)  # staging gone: what the decision recorded of it
    assert isinstance(summary, ManifestSummary)
    assert (summary.digest, summary.total_files, summary.total_bytes) == \
        (manifest.digest, 1, 1)
    assert sink.latest_transaction("0") == txn
    assert sink.output_uri("0") == sink.storage.uri(sink.layout.published_dir("0"))


def test_poll_of_a_fenced_and_an_aborted_attempt(tmp_path):
    sink = Sink(str(tmp_path / "t"), "polls")
    first, _ = stage(sink, "0", {"p.parquet": b"x"})
    second, _ = stage(sink, "0", {"p.parquet": b"y"}, precommit=False)

    status = sink.poll(first)  # a newer attempt began: the sensor of attempt 1 is fenced
    assert (status.state, status.highest_attempt) == (TxnState.PRECOMMITTED, 2)
    assert sink.latest_transaction("0") == second

    sink.abort(second, reason="rejected at the gate")
    status = sink.poll(second)
    assert (status.state, status.reason, status.manifest) == \
        (TxnState.ABORTED, "rejected at the gate", None)
    assert not sink.is_published(second)
    assert sink.sealed(second) is None


def test_poll_of_a_transaction_whose_records_are_gone_answers_without_a_traceback(tmp_path):
    """A sensor polls a transaction it holds (from XCom) after its epoch's ledger folder
    was removed by hand: the answer is "open, nothing above it, not published" (recover
    and a commit then refuse it loudly), never an AttributeError from inside the query."""
    sink = Sink(str(tmp_path / "t"), "polls")
    txn, _ = stage(sink, "0", {"p.parquet": b"x"}, precommit=False)
    other, _ = stage(sink, "1", {"p.parquet": b"y"}, precommit=False)
    folder = sink.layout.record("0", 1, "begin.json").rsplit("/attempt=", 1)[0]
    sink.storage.delete_prefix(folder)

    status = sink.poll(txn)
    assert (status.state, status.highest_attempt, status.reason, status.manifest,
            status.validated) == (TxnState.OPEN, 1, None, None, False)
    assert not sink.is_published(txn)
    assert sink.latest_transaction("0") is None
    assert sink.poll(other).state is TxnState.OPEN  # the other epoch is untouched
