"""The normal Airflow flow still takes the commit's fast path (issue 32 §2).

The job pre-commits (the job-side ``JobTransaction.precommit``, as a Spark job calls it),
the sensor's check validates the manifest and hands its digest over, and the commit
task commits that pointer: the commit must not decode the manifest's entries again.
Counted by a spy on the one function every full decode of entries goes through, on
real local files, the real hook and the real job-side code (no Spark session: the
job's pre-commit needs none).
"""

from __future__ import annotations

import os

import pytest

from airflow_tpc import Sink
from airflow_tpc.core import manifest as manifest_mod
from airflow_tpc.core import manifest_codec
from airflow_tpc.core.manifest import SealedEntries
from airflow_tpc.core.records import VALIDATED

FILES = {"part-0.parquet": b"x" * 100, "day=1/part-1.parquet": b"y" * 50}


@pytest.fixture()
def decodes(monkeypatch):
    calls: list[int] = []
    real = manifest_codec.entries_of

    def spy(raw, where):
        calls.append(len(raw))
        return real(raw, where)

    monkeypatch.setattr(manifest_codec, "entries_of", spy)
    monkeypatch.setattr(manifest_mod, "entries_of", spy)
    return calls


def _job_precommits(sink: Sink, epoch: str):
    """What StagedSparkSubmitOperator's job does: stage files, then ``txn.precommit()``
    of the payload it was given."""
    from airflow_tpc.spark import JobTransaction, build_payload

    txn = sink.begin(epoch)
    for rel, data in FILES.items():
        sink.storage.put(sink.storage.join(sink.layout.staging(epoch, txn.attempt), rel), data)
    JobTransaction.from_payload(build_payload(txn)).precommit()
    return txn


def _sensor_then_commit(sink: Sink, txn, decodes: list[int]):
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    hook = TpcHook(sink.target, sink.namespace)
    check = hook.check_precommit(txn.to_dict())  # the sensor's poke: validates in full
    pointer = hook.precommit_pointer(check)
    assert check.status == "ready" and decodes, "the sensor decodes the entries"
    del decodes[:]
    return hook.commit_pointer(pointer).result


def test_job_precommit_sensor_commit_takes_the_shortcut(tmp_path, airflow_db, decodes):
    sink = Sink(str(tmp_path / "t"), "flow")
    txn = _job_precommits(sink, "2026-01-01")
    assert sink.ledger.read("2026-01-01", txn.attempt, VALIDATED).by == "precommit"
    result = _sensor_then_commit(sink, txn, decodes)
    assert result.outcome == "committed"
    assert decodes == [] and isinstance(result.manifest.files, SealedEntries) \
        and result.manifest.files._files is None
    assert sink.committed_files()["2026-01-01"]


def test_without_the_precommit_record_the_sensor_records_what_it_validated(
        tmp_path, airflow_db, decodes):
    """A pre-commit of the previous build (or one that crashed after its seal) left no
    validated.json: the sensor, which validated the manifest in full, records it once,
    and the commit of its pointer takes the shortcut."""
    sink = Sink(str(tmp_path / "t"), "flow")
    txn = _job_precommits(sink, "2026-01-01")
    os.unlink(sink.layout.record("2026-01-01", txn.attempt, VALIDATED))
    result = _sensor_then_commit(sink, txn, decodes)
    assert sink.ledger.read("2026-01-01", txn.attempt, VALIDATED).by == "sensor"
    assert result.outcome == "committed" and decodes == []
