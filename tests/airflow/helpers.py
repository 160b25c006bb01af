"""Helpers for driving real DAG runs in-process (dag.test and task re-runs)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def day(s: str) -> datetime:
    return datetime.fromisoformat(s).replace(tzinfo=timezone.utc)


def states(dr: Any) -> dict[str, str]:
    from airflow import settings

    with settings.Session() as session:
        return {ti.task_id.split(".")[-1]: str(getattr(ti.state, "value", ti.state))
                for ti in dr.get_task_instances(session=session)}


def tries(dr: Any, task_id: str) -> int:
    from airflow import settings

    with settings.Session() as session:
        for ti in dr.get_task_instances(session=session):
            if ti.task_id.split(".")[-1] == task_id:
                return ti.try_number
    raise KeyError(task_id)


def find_run(dag_id: str, run_id: str) -> Any:
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    with settings.Session() as session:
        return session.scalar(select(DagRun).where(DagRun.dag_id == dag_id,
                                                   DagRun.run_id == run_id))


def rerun_tasks(dag: Any, run_id: str, task_suffixes: list[str],
                orphan_to_failed: bool = True, timeout: float = 1200) -> Any:
    """Clear some tasks of an *existing* run and run the run to completion again.

    This is what "Clear" in the UI followed by the scheduler does; it uses the same
    minimal loop as ``dag.test`` (which would instead delete and recreate the run).
    A task left RUNNING by a killed process is first failed, as the scheduler's
    zombie detection would.  ``timeout`` bounds a hang only: minutes, so that a busy
    machine gives a slow pass (the caller asserts on the state of the run returned).
    """
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    session = settings.Session()
    try:
        dr = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id,
                                                 DagRun.run_id == run_id))
        dr.dag = scheduler_dag
        tis = [ti for ti in dr.get_task_instances(session=session)
               if ti.task_id.split(".")[-1] in task_suffixes]
        for ti in tis:
            if orphan_to_failed and ti.state == TaskInstanceState.RUNNING:
                ti.state = TaskInstanceState.FAILED
        session.commit()
        clear_task_instances(tis, session, dag_run_state=DagRunState.RUNNING)
        session.commit()
        dr = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id,
                                                 DagRun.run_id == run_id))
        dr.dag = scheduler_dag
        dr.state = DagRunState.RUNNING
        session.commit()
        deadline = time.monotonic() + timeout
        while dr.state == DagRunState.RUNNING and time.monotonic() < deadline:
            session.expire_all()
            schedulable, _ = dr.update_state(session=session)
            for ti in schedulable:
                if ti.state != TaskInstanceState.UP_FOR_RESCHEDULE:
                    ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            scheduled = [ti for ti in dr.get_task_instances(session=session)
                         if ti.state == TaskInstanceState.SCHEDULED]
            if not scheduled:
                time.sleep(0.5)
            for ti in scheduled:
                with contextlib.suppress(Exception):  # the task's state records it
                    _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
        session.expire_all()
        return session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id,
                                                   DagRun.run_id == run_id))
    finally:
        session.close()


def asset_events(uri: str) -> list[dict[str, Any]]:
    from airflow import settings
    from airflow.models.asset import AssetEvent, AssetModel
    from sqlalchemy import select

    with settings.Session() as session:
        rows = session.scalars(select(AssetEvent).join(AssetModel,
                                                       AssetEvent.asset_id == AssetModel.id)
                               .where(AssetModel.uri == uri).order_by(AssetEvent.id)).all()
        return [dict(r.extra or {}) for r in rows]


def queued_for(dag_id: str) -> int:
    """How many Asset-triggered runs are queued for ``dag_id`` (AssetDagRunQueue rows)."""
    from airflow import settings
    from airflow.models.asset import AssetDagRunQueue
    from sqlalchemy import func, select

    with settings.Session() as session:
        return session.scalar(select(func.count()).select_from(AssetDagRunQueue)
                              .where(AssetDagRunQueue.target_dag_id == dag_id)) or 0


def tree(root: str | os.PathLike[str]) -> list[str]:
    base = Path(root)
    if not base.exists():
        return []
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


def published(root: str) -> dict[str, list[str]]:
    """epoch -> data files a plain reader of the target sees (no _/. files, no ledger)."""
    out: dict[str, list[str]] = {}
    for rel in tree(root):
        parts = rel.split("/")
        if parts[0].startswith("_") or any(p.startswith(("_", ".")) for p in parts):
            continue
        if parts[0].startswith("epoch="):
            out.setdefault(parts[0][6:], []).append("/".join(parts[1:]))
    return out


def read_rows(root: str) -> dict[str, int]:
    """epoch -> sum of the 'events' column as a reader of the published table sees it."""
    import pyarrow.dataset as ds

    if not published(root):
        return {}
    dataset = ds.dataset(root, format="parquet", partitioning="hive",
                         exclude_invalid_files=True,
                         ignore_prefixes=["_", "."])
    table = dataset.to_table()
    out: dict[str, int] = {}
    for ep, n in zip(table.column("epoch").to_pylist(), table.column("events").to_pylist(),
                     strict=True):
        out[str(ep)] = out.get(str(ep), 0) + int(n)
    return out


#: Storage methods that only compute names: not requests.
_NAMING = frozenset({"uri", "join"})


@contextlib.contextmanager
def count_storage_requests(storage_cls: type) -> Any:
    """Count the requests made through ``storage_cls`` (a real store class) while inside.

    Every public method of the class is wrapped for the duration, on the class itself, so
    a Sink built anywhere inside is counted too; a method called by another counted one
    (``exists`` reading through ``read_bytes``) counts once, as the outer request.
    Yields a Counter: method name -> calls.
    """
    import inspect
    import threading
    from collections import Counter

    counts: Counter[str] = Counter()
    state = threading.local()
    saved: dict[str, Any] = {}

    def wrap(name: str, fn: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(state, "depth", 0)
            if depth == 0:
                counts[name] += 1
            state.depth = depth + 1
            try:
                return fn(*args, **kwargs)
            finally:
                state.depth = depth
        return counted

    for name in dir(storage_cls):
        if name.startswith("_") or name in _NAMING:
            continue
        raw = inspect.getattr_static(storage_cls, name)
        if not inspect.isfunction(raw):  # class/static methods name things; attributes
            continue
        saved[name] = vars(storage_cls).get(name)
        setattr(storage_cls, name, wrap(name, raw))
    try:
        yield counts
    finally:
        for name, own in saved.items():
            if own is None:
                delattr(storage_cls, name)
            else:
                setattr(storage_cls, name, own)


def listings_and_reads(counts: dict[str, int]) -> tuple[int, int, dict[str, int]]:
    """(listings, reads, every other request) of a :func:`count_storage_requests` Counter."""
    listings = sum(counts.get(n, 0) for n in ("list", "list_dirs"))
    reads = sum(counts.get(n, 0) for n in ("read_bytes", "read_versioned", "exists"))
    other = {n: c for n, c in counts.items()
             if n not in ("list", "list_dirs", "read_bytes", "read_versioned", "exists")}
    return listings, reads, other


def xcom_value(dag_id: str, run_id: str, task_id: str, key: str) -> Any:
    """One XCom of a finished run, read from the metadata DB (JSON decoded)."""
    from airflow import settings
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    with settings.Session() as session:
        raw = session.scalar(select(XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id,
            XComModel.task_id == task_id, XComModel.key == key))
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def assert_secret_kept_out(secret: str, captured: Any) -> None:
    """``secret`` is in none of what a DAG run leaves behind: the captured stdout and
    stderr (``capfd.readouterr()``), and the metadata DB's XComs, trigger rows, rendered
    fields and task state store."""
    from airflow import settings
    from sqlalchemy import text

    assert secret not in captured.out and secret not in captured.err
    with settings.Session() as session:
        for table in ("xcom", "trigger", "rendered_task_instance_fields", "task_state_store"):
            dump = str(session.execute(text(f"SELECT * FROM {table}")).fetchall())
            assert secret not in dump, table
