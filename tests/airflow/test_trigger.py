"""The deferrable path's trigger, driven directly (no Spark): ready, failure signal, timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from airflow_tpc import Sink


@pytest.fixture()
def sink(tmp_path, airflow_db):
    return Sink(str(tmp_path / "target"), "trig")


def _trigger(sink, txn, **kw):
    from airflow_tpc.airflow.triggers.tpc import PrecommitTrigger

    return PrecommitTrigger(txn=txn.to_dict(), target=sink.target, namespace="trig",
                            poll_interval=0.2, **kw)


async def _first_event(trigger):
    async for event in trigger.run():
        return event.payload
    return None


def _stage(txn, name="part-0.parquet", data=b"x" * 100):
    path = Path(txn.staging_uri.removeprefix("file://"))
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_bytes(data)


def test_trigger_fires_when_the_job_precommits_later(sink):
    txn = sink.begin("2026-01-01")
    _stage(txn)
    trigger = _trigger(sink, txn)
    cls, kwargs = trigger.serialize()
    assert cls == "airflow_tpc.airflow.triggers.tpc.PrecommitTrigger"
    assert "secret" not in str(kwargs).lower()

    async def scenario():
        task = asyncio.create_task(_first_event(trigger))
        await asyncio.sleep(0.5)
        assert not task.done()  # still waiting: not pre-committed yet
        await asyncio.to_thread(sink.precommit, txn)
        return await asyncio.wait_for(task, 10)

    event = asyncio.run(scenario())
    assert event["status"] == "ready", event


def test_trigger_fails_on_abort_and_on_fencing(sink):
    txn = sink.begin("2026-01-02")
    sink.abort(txn, "job failed")
    event = asyncio.run(asyncio.wait_for(_first_event(_trigger(sink, txn)), 10))
    assert event["status"] == "failed" and "ABORTED" in event["message"]

    old = sink.begin("2026-01-03")
    sink.begin("2026-01-03")  # a newer attempt fences the old one
    event = asyncio.run(asyncio.wait_for(_first_event(_trigger(sink, old)), 10))
    assert event["status"] == "failed" and "fenced" in event["message"]


def test_trigger_times_out_clearly(sink):
    txn = sink.begin("2026-01-04")
    t = time.monotonic()
    event = asyncio.run(asyncio.wait_for(
        _first_event(_trigger(sink, txn, deadline=time.time() + 0.5)), 10))
    assert event["status"] == "timeout" and "not pre-committed" in event["message"]
    assert time.monotonic() - t < 5


# -- the group's trigger ---------------------------------------------------------------
@pytest.fixture()
def group(tmp_path, airflow_db):
    from airflow_tpc import Group

    return Group({n: Sink(str(tmp_path / n), "trig") for n in ("events", "daily")},
                 str(tmp_path / "_tpc_groups" / "trig"))


def _group_trigger(group, gtxn, **kw):
    from airflow_tpc.airflow.operators.group import GroupArgs
    from airflow_tpc.airflow.triggers.group import GroupPrecommitTrigger

    args = GroupArgs.of({n: s.target for n, s in group.sinks.items()}, "trig", group.uri)
    return GroupPrecommitTrigger(txn={"epoch": gtxn.epoch, "attempt": gtxn.attempt},
                                 **args.serialize(), poll_interval=0.2, **kw)


def test_group_trigger_fires_once_every_member_is_sealed(group):
    gtxn = group.begin("2026-01-05")
    for txn in gtxn.members.values():
        _stage(txn)
    trigger = _group_trigger(group, gtxn)
    cls, kwargs = trigger.serialize()
    assert cls == "airflow_tpc.airflow.triggers.group.GroupPrecommitTrigger"
    again = type(trigger)(**kwargs)  # what the triggerer rebuilds from the metadata DB
    assert again.serialize() == (cls, kwargs)

    async def scenario():
        task = asyncio.create_task(_first_event(again))
        await asyncio.to_thread(group.sinks["daily"].precommit, gtxn.member("daily"))
        await asyncio.sleep(0.6)
        assert not task.done()  # one member sealed is not the group sealed
        await asyncio.to_thread(group.sinks["events"].precommit, gtxn.member("events"))
        return await asyncio.wait_for(task, 10)

    event = asyncio.run(scenario())
    assert event["status"] == "ready", event


def test_group_trigger_fails_on_a_group_abort_a_fence_and_an_empty_member(group):
    gtxn = group.begin("2026-01-06")
    group.abort(gtxn, "job failed")
    event = asyncio.run(asyncio.wait_for(_first_event(_group_trigger(group, gtxn)), 10))
    assert event["status"] == "failed" and "aborted" in event["message"]

    old = group.begin("2026-01-07")
    group.begin("2026-01-07")  # a newer group attempt fences the old one
    event = asyncio.run(asyncio.wait_for(_first_event(_group_trigger(group, old)), 10))
    assert event["status"] == "failed" and "fenced" in event["message"]

    empty = group.begin("2026-01-08")
    _stage(empty.member("events"))
    group.precommit(empty)  # "daily" sealed no files
    event = asyncio.run(asyncio.wait_for(_first_event(_group_trigger(group, empty)), 10))
    assert event["status"] == "failed" and "'daily'" in event["message"]
    assert "no files" in event["message"]
    event = asyncio.run(asyncio.wait_for(
        _first_event(_group_trigger(group, empty, allow_empty=True)), 10))
    assert event["status"] == "ready", event
