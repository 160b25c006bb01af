"""A Spark job writing a group: current_group, per-member output, sealed, one group commit.

Real parts only: a real ``airflow_tpc.Group`` of two local folder targets, the real
payload, the suite's real Spark session writing with its native Parquet writer, the
driver's group commit, and the committed files read back with pyarrow.
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import pyarrow.parquet as pq
import pytest

from airflow_tpc import FencedError, Group, Sink, TpcError
from airflow_tpc.spark import (
    JobGroup,
    NoTransactionError,
    build_group_payload,
    build_payload,
    current_group,
)
from airflow_tpc.spark.group_context import GROUP_CONF_KEY, GROUP_ENV_VAR

EPOCH = "2026-11-20"


@pytest.fixture(autouse=True)
def _no_ambient_group(monkeypatch):
    monkeypatch.delenv(GROUP_ENV_VAR, raising=False)


@pytest.fixture()
def group(tmp_path):
    sinks = {n: Sink(str(tmp_path / n), "etl") for n in ("events", "daily")}
    return Group(sinks, str(tmp_path / "_tpc_groups" / "etl"))


def payload_of(gtxn, **member_kwargs) -> str:
    """What the submit operator does: each member's own payload, wrapped for the group."""
    return build_group_payload(gtxn.group, gtxn.namespace, gtxn.epoch, gtxn.attempt,
                               {n: build_payload(t, **member_kwargs)
                                for n, t in gtxn.members.items()})


def local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def test_a_spark_job_writes_every_member_and_the_group_commits_them_once(spark, group):
    gtxn = group.begin(EPOCH)
    spark.conf.set(GROUP_CONF_KEY, payload_of(gtxn))
    try:
        job = current_group(spark)
    finally:
        spark.conf.unset(GROUP_CONF_KEY)
    assert (job.group, job.namespace, job.epoch, job.attempt, job.txn_id) == (
        group.uri, "etl", EPOCH, gtxn.attempt, gtxn.txn_id)
    assert job.names == ["daily", "events"]
    for name in job.names:
        assert job.member(name).txn == gtxn.member(name)
        assert job.output_uri(name) == gtxn.member(name).staging_uri
    # plain and picklable: executors get the same view
    assert pickle.loads(pickle.dumps(job)) == job == JobGroup.from_payload(job.to_json())
    assert spark.sparkContext.parallelize([0], 1).map(
        lambda _: job.output_uri("daily")).collect() == [job.output_uri("daily")]

    written = {"events": list(range(0, 300)), "daily": list(range(1000, 1012))}
    for name, ids in written.items():
        df = spark.createDataFrame([(i, f"{name}-{i}") for i in ids], "id long, label string")
        job.with_epoch_column(name, df).repartition(2).write.parquet(job.output_uri(name))
    manifests = job.precommit()
    assert sorted(manifests) == ["daily", "events"]
    assert {n: m.total_rows for n, m in manifests.items()} == {"events": 300, "daily": 12}
    assert {n: m.digest for n, m in job.precommit().items()} == {
        n: m.digest for n, m in manifests.items()}  # idempotent
    assert group.stable_epochs() == {} and group.committed_files() == {
        "daily": {}, "events": {}}  # sealed is not visible

    result = group.commit(gtxn, expected_digests={n: m.digest for n, m in manifests.items()})
    assert result.outcome == "committed"
    assert result.published == {"daily": gtxn.attempt, "events": gtxn.attempt}
    assert group.stable_epochs() == {EPOCH: gtxn.attempt}
    files = group.committed_files()
    for name, ids in written.items():
        uris = files[name][EPOCH]
        assert uris and all(u.endswith(".parquet") for u in uris)
        rows = sorted((r["id"], r["label"]) for u in uris
                      for r in pq.read_table(local(u)).to_pylist())
        assert rows == [(i, f"{name}-{i}") for i in ids]  # exactly these, once


def test_an_unknown_member_names_the_known_ones(group, monkeypatch):
    gtxn = group.begin(EPOCH)
    monkeypatch.setenv(GROUP_ENV_VAR, payload_of(gtxn))
    job = current_group()  # no Spark session: the environment variable
    for ask in (job.member, job.output_uri, lambda n: job.with_epoch_column(n, None)):
        with pytest.raises(TpcError, match=r"no member 'facts' \(members: daily, events\)"):
            ask("facts")
    monkeypatch.delenv(GROUP_ENV_VAR)
    with pytest.raises(NoTransactionError, match=f"{GROUP_CONF_KEY}.*{GROUP_ENV_VAR}"):
        current_group()


def test_secrets_never_travel_and_a_payload_with_them_is_refused(group):
    gtxn = group.begin(EPOCH)
    secret = {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1",
              "key": "AKIAXXXX", "secret": "very-secret"}
    clean = payload_of(gtxn, storage_options=secret)
    assert "very-secret" not in clean and "AKIAXXXX" not in clean  # dropped per member
    forged = json.loads(build_payload(gtxn.member("daily")))
    forged["storage"].update(key="AKIAXXXX", secret="very-secret")
    members = {"daily": json.dumps(forged), "events": build_payload(gtxn.member("events"))}
    refused = r"member 'daily' carries storage options \['key', 'secret'\]: only"
    with pytest.raises(TpcError, match=refused):
        build_group_payload(gtxn.group, "etl", EPOCH, gtxn.attempt, members)
    doc = json.loads(clean)
    doc["members"]["daily"] = forged
    with pytest.raises(TpcError, match=refused):
        JobGroup.from_payload(json.dumps(doc))


def test_a_member_of_another_attempt_is_refused(group):
    gtxn = group.begin(EPOCH)
    other = dataclasses.replace(gtxn.member("events"), attempt=gtxn.attempt + 1)
    members = {"daily": build_payload(gtxn.member("daily")), "events": build_payload(other)}
    with pytest.raises(TpcError, match=rf"transaction etl/{EPOCH}/{gtxn.attempt} of the "
                       rf"group .*member 'events' is etl/{EPOCH}/{gtxn.attempt + 1}\. "):
        build_group_payload(gtxn.group, "etl", EPOCH, gtxn.attempt, members)
    doc = json.loads(payload_of(gtxn))
    doc["attempt"] = gtxn.attempt + 1  # the group's own attempt edited: every member differs
    with pytest.raises(TpcError, match="member 'daily' is .*; member 'events' is"):
        JobGroup.from_payload(doc)


def test_a_zombie_job_is_fenced_naming_the_member(group, monkeypatch):
    old = group.begin(EPOCH)
    stale = payload_of(old)
    job = JobGroup.from_payload(stale)
    job.check_live()  # live until the retry begins
    new = group.begin(EPOCH)  # e.g. an Airflow retry of the group's run
    assert new.attempt > old.attempt
    with pytest.raises(FencedError, match=r"group member 'daily': .*zombie"):
        job.check_live()
    with pytest.raises(FencedError, match=r"group member 'daily'"):
        job.precommit()
    monkeypatch.setenv(GROUP_ENV_VAR, stale)
    with pytest.raises(FencedError, match="zombie"):
        current_group()
    current_group(check=False)  # opt-out; the core still refuses its seal (above)
    monkeypatch.setenv(GROUP_ENV_VAR, payload_of(new))
    assert current_group().attempt == new.attempt
    # a payload naming a target's transaction under another member's name is refused
    swapped = build_group_payload(new.group, "etl", EPOCH, new.attempt, {
        "daily": build_payload(new.member("events")),
        "events": build_payload(new.member("daily"))})
    with pytest.raises(TpcError, match=r"group member 'daily': .*not begun as member 'daily'"):
        JobGroup.from_payload(swapped).check_live()
