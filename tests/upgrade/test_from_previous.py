"""Upgrades never lose a decided epoch (issue 32 §5): targets written by the previous
release (v0.1.0, its own code run from its own tree) are recovered, committed and
read by this build, each epoch exactly once at the right attempt.

The old build leaves every state it can (tests/upgrade/old_build.py): published
epochs (version-2 markers locally, version-1 on S3), a re-run, an aborted attempt,
a re-run decided and crashed mid-promotion, a pre-committed undecided attempt, an
abort crashed after its decision, and a first commit killed for real right after its
decision; a group with a published epoch, a decided epoch crashed after its first
member switched, a pre-committed one and an aborted one.  Only behaviour is asserted
(rows read back, states, what the CLI reports), never this build's own files.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Group, Sink, SinkConfig, TxnState

from ..conftest import make_store
from ..core.helpers import assert_invariant, committed_contents, stage
from .helpers import cli_json, committed_rows, once, states

NS = "upg"
#: store, promotion mode, the old build's crash in the middle of a re-run's promotion.
CASES = {"local": ("local", "move", "promote.before_swap"),
         "local-manifest": ("local", "manifest", "promote.before_cleanup"),
         "s3": ("s3", "move", "promote.before_cleanup")}


@pytest.mark.parametrize("case", list(CASES))
def test_a_target_of_the_previous_release_recovers_commits_and_reads(
        case, run_old, request, tmp_path, capsys):
    """Every state locally (version-2 markers: the manifest in the published folder);
    the key cases (published, decided mid-promotion, decided and killed, pre-committed,
    aborted) in ``manifest`` mode (version-2 markers naming staging) and on S3
    (version-1 markers; moto's requests are slow)."""
    kind, mode, mid_promotion = CASES[case]
    full = case == "local"
    target, options = make_store(kind, request, tmp_path)
    old = run_old("folder", {"target": target, "namespace": NS, "storage_options": options,
                             "promotion": mode, "mid_promotion_step": mid_promotion,
                             "full": full}, killed=True)
    assert old["version"] == "0.1.0"
    config = SinkConfig(promotion=mode)

    def new_sink() -> Sink:  # a fresh process of this build: only storage survives
        return Sink(target, NS, storage_options=options, config=config)

    sink = new_sink()

    # Read before any write of this build: what the old build published, each once; the
    # re-run crashed mid-promotion shows one attempt whole, never both.
    before = committed_rows(sink)
    assert before.pop("e3") in (once(e3=1)["e3"], once(e3=2)["e3"])
    assert before == (once(e1=1, e2=2) if full else once(e1=1))
    want_states = {"e3/2": "COMMITTED", "e4/1": "PRECOMMITTED", "e5/1": "ABORTED",
                   "e7/1": "COMMITTED", **({"e2/3": "ABORTED", "e6/1": "ABORTED"} if full
                                           else {})}
    found = states(sink)
    assert {k: found.get(k) for k in want_states} == want_states

    # Recover rolls the old build's decided commits forward and leaves the undecided
    # attempt (not expired, not superseded) alone; the retried commit task commits it.
    report = sink.recover()
    assert {("e3", 2), ("e7", 1)} <= set(report.rolled_forward)
    assert states(new_sink())["e4/1"] == "PRECOMMITTED"
    result = sink.commit(sink.transaction("e4", 1), expected_digest=old["digests"]["e4"])
    assert result.outcome == "committed"
    # This build writes on: a re-run of an old epoch, fenced above the old build's
    # attempts, and a new epoch.
    txn, manifest = stage(sink, "e1", {"part-0.parquet": _parquet("e1@2")})
    assert txn.attempt == 2
    sink.commit(txn, expected_digest=manifest.digest)
    txn, manifest = stage(sink, "e8", {"part-0.parquet": _parquet("e8@1")})
    sink.commit(txn, expected_digest=manifest.digest)

    want = once(e1=2, e3=2, e4=1, e7=1, e8=1, **({"e2": 2} if full else {}))
    reopened = new_sink()
    assert committed_rows(reopened) == want
    assert_invariant(reopened, committed_contents(reopened), open_staging_ok=False)
    after = states(reopened)
    aborted = {k: v for k, v in want_states.items() if v == "ABORTED"}
    assert {k: after[k] for k in aborted} == aborted  # and their staging gone (invariant)

    cli = ["--endpoint-url", options["endpoint_url"]] if options else []
    status = cli_json(capsys, "status", target, *cli)
    assert sorted(status["committed_epochs"]) == sorted(want)
    assert {e["epoch"]: e["published_attempt"] for e in status["epochs"]
            if e["published_attempt"] is not None} == {e: int(t[0].rsplit("@")[1])
                                                      for e, t in want.items()}
    listed = cli_json(capsys, "list", target, *cli)
    assert {f"{i['epoch']}/{i['attempt']}": i["state"] for i in listed} == after
    if case == "local":  # and through Spark, as a job reads it (the JVM: once)
        from airflow_tpc.spark import read_committed

        df = read_committed(request.getfixturevalue("spark"), target)
        read: dict[str, list[str]] = {}
        for row in df.select("epoch", "tag").collect():
            read.setdefault(row["epoch"], []).append(row["tag"])
        assert {e: sorted(t) for e, t in read.items()} == want


def test_a_group_of_the_previous_release_recovers_commits_and_reads(run_old, tmp_path):
    members = {n: str(tmp_path / n) for n in ("events", "daily")}
    spec = {"group": str(tmp_path / "_tpc_groups" / "etl"), "namespace": NS,
            "members": members}
    run_old("group", spec)

    def group() -> Group:  # a fresh process of this build: only storage survives
        return Group({n: Sink(t, NS) for n, t in members.items()}, spec["group"])

    # g2 was decided and one member switched: the cut leaves it out, never half shown.
    assert group().stable_epochs() == {"g1": 1}
    assert _cut(group()) == {"g1": 1}
    group().recover()
    g = group()
    assert g.stable_epochs() == {"g1": 1, "g2": 1}
    gtxn = g.transaction("g3", 1)  # the old build's pre-committed group attempt
    assert g.commit(gtxn).outcome == "committed"
    assert group().stable_epochs() == {"g1": 1, "g2": 1, "g3": 1}
    assert _cut(group()) == {"g1": 1, "g2": 1, "g3": 1}
    for name, target in members.items():
        member = Sink(target, NS)
        assert committed_rows(member) == {e: [f"{name}:{e}@1"] * 2 for e in ("g1", "g2", "g3")}
        assert {i.attempt: i.state for i in member.describe("g4")} == {1: TxnState.ABORTED}
        assert_invariant(member, committed_contents(member), open_staging_ok=False)


def _cut(group: Group) -> dict[str, int]:
    """epoch -> the attempt every member shows in the group's consistent cut (the rows'
    tags, each member's file read); asserts every member shows the same one."""
    out: dict[str, int] = {}
    for name, per_epoch in group.committed_files().items():
        rows = committed_rows(group.sinks[name])
        for epoch in per_epoch:
            tags = set(rows[epoch])
            assert len(tags) == 1 and next(iter(tags)).startswith(f"{name}:{epoch}@")
            attempt = int(next(iter(tags)).rsplit("@", 1)[1])
            assert out.setdefault(epoch, attempt) == attempt
    return out


def _parquet(tag: str) -> bytes:
    """A file as the old build writes them (two rows of one tag), written by this build."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "tag": [tag, tag]}), out)
    return out.getvalue().to_pybytes()
