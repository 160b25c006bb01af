"""The S3 correctness scenarios, on Azure Blob Storage (Azurite): racing committers,
zombie fencing, SIGKILL mid-commit and mid-recover, bad input that changes nothing.

The scenarios are the very test bodies the other modules run on local disks, moto and
SeaweedFS, handed an Azure store: the races are settled by Azure's conditional writes
(``If-None-Match: *`` for the decision, ``If-Match`` for the marker) and promotion by
server-side copies guarded by each source's ETag.  Only these scenarios run on Azure
(not every test of the ``store`` fixture): the suite's time budget.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink, SinkConfig, TxnState

from ..conftest import make_store
from . import test_checks_exist as checks
from . import test_fencing_and_races as races
from . import test_process_kill as kill
from . import test_process_kill_more as kill_more
from .helpers import assert_invariant, stage
from .test_crashpoints import COMMIT_STEPS


@pytest.fixture()
def store(request, tmp_path):
    return make_store("azure", request, tmp_path)


@pytest.fixture()
def world(store):
    """test_checks_exist's (store, config), staging inside the target."""
    return store, SinkConfig()


# ------------------------------------------------------------ fencing and races
def test_zombie_attempt_is_fenced_and_never_promoted_on_azure(store):
    races.test_zombie_attempt_is_fenced_and_never_promoted(store)


def test_two_racing_committers_one_decision_on_azure(store):
    races.test_two_racing_committers_one_decision(store)


def test_racing_commit_and_abort_have_one_outcome_on_azure(store):
    races.test_racing_commit_and_abort_have_one_outcome(store)


def test_racing_begins_get_distinct_increasing_attempts_on_azure(store):
    races.test_racing_begins_get_distinct_increasing_attempts(store)


def test_manifest_mode_publishes_without_copying_on_azure(store):
    races.test_manifest_mode_publishes_without_copying(store)


# ------------------------------------------------------ SIGKILL, then a rerun
@pytest.mark.parametrize("step", COMMIT_STEPS["move-s3"])
def test_sigkill_during_commit_then_rerun_on_azure(step, store, tmp_path):
    """Promotion on Azure is S3's (copies, then the marker's compare-and-swap): the
    same steps, each killed by SIGKILL, then a fresh process reruns the commit."""
    sink = Sink(store[0], "killed", storage_options=store[1])
    old, _ = stage(sink, "1", {"a.parquet": b"old"})
    sink.commit(old)
    txn, manifest = stage(sink, "1", {"a.parquet": b"new", "b.parquet": b"new-b"})
    kill._run_and_kill(tmp_path, store, txn, "commit", step)
    rerun = Sink(store[0], "killed", storage_options=store[1])
    result = rerun.commit(rerun.transaction("1", txn.attempt), expected_digest=manifest.digest)
    assert result.outcome in ("committed", "already_committed")
    assert_invariant(rerun, {"1": [b"new", b"new-b"]}, open_staging_ok=False)
    states = {i.attempt: i.state for i in rerun.describe("1")}
    assert states == {old.attempt: TxnState.COMMITTED, txn.attempt: TxnState.COMMITTED}


@pytest.mark.parametrize("step", ["recover.before_abort", "recover.before_cleanup"])
def test_sigkill_during_recover_then_rerun_on_azure(step, request, tmp_path, monkeypatch):
    monkeypatch.setattr(kill_more, "make_store", lambda kind, req, path:
                        make_store("azure", req, path))
    kill_more.test_sigkill_during_recover_then_rerun("azure", step, request, tmp_path)


# ------------------------------------------- bad input: refused, nothing changed
#: Two of test_checks_exist's forgeries (a foreign staging URI, an attempt never begun):
#: the same check refuses the others, which run on local disks and S3 (CI time).
@pytest.mark.parametrize("forgery", ["attempt-not-begun", "staging_uri"])
def test_forged_transaction_is_refused_and_changes_nothing_on_azure(world, forgery):
    checks.test_forged_transaction_is_refused_and_changes_nothing(world, forgery)


@pytest.mark.parametrize("other_target", ["same-store", "other-store"])
def test_manifest_with_changed_target_changes_nothing_on_azure(world, other_target):
    checks.test_manifest_with_changed_target_is_refused_and_changes_nothing(world, other_target)


@pytest.mark.parametrize("change", ["file-added", "file-resized"])
def test_reprecommit_after_staging_changed_is_refused_on_azure(world, change):
    checks.test_reprecommit_after_staging_changed_is_refused(world, change)
