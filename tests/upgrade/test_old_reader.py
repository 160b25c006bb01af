"""The other direction: the previous release (v0.1.0, its own code) READS targets this
build writes, as when readers are upgraded after the writers.

What works: every committed epoch's rows through the markers (version 2 locally,
version 1 on S3), each attempt's state, the CLI's ``status`` and ``list``, a group's
stable cut; reading changes nothing.  What it cannot read — a decision or a marker
of a version it does not know, as a later release may write — it refuses with one
error (the CLI: exit 2, one ``error:`` line), never with another attempt's rows, and
its ``recover`` then changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from airflow_tpc import Group, Sink
from airflow_tpc.core.faults import InjectedCrash, armed

from ..conftest import make_store
from ..core.helpers import full_tree, local_tree, write_staged
from .test_from_previous import _parquet

NS = "upg-new"


def _commit(sink: Sink, epoch: str, *, crash_at: str | None = None,
            decide: bool = True) -> None:
    """Begin, stage one file tagged with its attempt, pre-commit; then commit (or crash
    at ``crash_at``, this build's fault injection; or, without ``decide``, stop)."""
    txn = sink.begin(epoch)
    write_staged(sink, txn, {"part-0.parquet": _parquet(f"{epoch}@{txn.attempt}")})
    manifest = sink.precommit(txn)
    if not decide:
        return
    if crash_at is None:
        sink.commit(txn, expected_digest=manifest.digest)
        return
    try:
        with armed(crash_at):
            sink.commit(txn, expected_digest=manifest.digest)
    except InjectedCrash:
        return
    raise AssertionError(f"never reached {crash_at}")


def _written_by_this_build(sink: Sink) -> None:
    """e1 published; e2 re-run (attempt 2 won); e3 pre-committed; e4 aborted; e5 decided,
    crashed before its promotion."""
    _commit(sink, "e1")
    _commit(sink, "e2")
    _commit(sink, "e2")
    _commit(sink, "e3", decide=False)
    _commit(sink, "e4", decide=False)
    sink.abort(sink.transaction("e4", 1))
    _commit(sink, "e5", crash_at="commit.after_decision")


def _rows(**epochs: int) -> dict[str, list[str]]:
    return {e: [f"{e}@{a}"] for e, a in epochs.items()}


def test_the_previous_release_reads_what_this_build_writes(run_old, request, tmp_path):
    local = Sink(str(tmp_path / "local"), NS)
    s3_target, s3_options = make_store("s3", request, tmp_path)
    s3 = Sink(s3_target, NS, storage_options=s3_options)
    for sink in (local, s3):
        _written_by_this_build(sink)
    members = {n: Sink(str(tmp_path / n), NS) for n in ("events", "daily")}
    group = Group(members, str(tmp_path / "_tpc_groups" / "etl"))
    for epoch in ("g1", "g2"):
        gtxn = group.begin(epoch)
        for name, sink in members.items():
            write_staged(sink, gtxn.member(name), {"p.parquet": _parquet(f"{epoch}@1")})
        group.precommit(gtxn)
        if epoch == "g1":
            group.commit(gtxn)
        else:  # decided, one member switched
            try:
                with armed("group.after_member"):
                    group.commit(gtxn)
            except InjectedCrash:
                pass
    before = {**full_tree(local), **full_tree(s3), **local_tree(str(tmp_path / "events")),
              **local_tree(str(tmp_path / "daily")), **local_tree(group.uri)}

    targets = {"local": local.target, "s3": s3.target,
               **{n: s.target for n, s in members.items()}}
    old = run_old("read", {"targets": targets, "namespace": NS, "storage_options": s3_options,
                           "group": group.uri, "members": list(members)})

    for name in ("local", "s3"):
        seen = old[name]
        assert seen["rows"] == {"ok": _rows(e1=1, e2=2)}, name
        assert seen["states"] == {"ok": {"e1/1": "COMMITTED", "e2/1": "COMMITTED",
                                         "e2/2": "COMMITTED", "e3/1": "PRECOMMITTED",
                                         "e4/1": "ABORTED", "e5/1": "COMMITTED"}}, name
    assert old["local"]["status"]["code"] == 0
    status = json.loads(old["local"]["status"]["stdout"])
    assert sorted(status["committed_epochs"]) == ["e1", "e2"]
    assert {e["epoch"]: e["published_attempt"] for e in status["epochs"]} == {
        "e1": 1, "e2": 2, "e3": None, "e4": None, "e5": None}
    assert old["local"]["list"]["code"] == 0
    assert len(json.loads(old["local"]["list"]["stdout"])) == 6
    # The group: g1 stable; g2 decided with one member switched is not in the cut.
    assert old["group"] == {"ok": {"g1": 1}}
    for name in members:
        assert old[name]["rows"]["ok"]["g1"] == ["g1@1"], name
    after = {**full_tree(local), **full_tree(s3), **local_tree(str(tmp_path / "events")),
             **local_tree(str(tmp_path / "daily")), **local_tree(group.uri)}
    assert after == before  # reading changed nothing


def _one_error(out: dict, what: str) -> None:
    """The old CLI refused: exit 2, nothing on stdout, one ``error:`` line, no
    traceback."""
    assert out["code"] == 2 and out["stdout"] == "", what
    assert out["stderr"].startswith("error:") and out["stderr"].count("\n") == 1, what
    assert "Traceback" not in out["stderr"], what


def _future(root: Path, case: str) -> None:
    """Make one record of a later, unknown version from this build's own: the commit
    decision of e3 (decided, not promoted), or the published marker of e2 (its
    ``files``/``manifest`` replaced, as PROTOCOL §12 item 5 asks of an incompatible
    marker)."""
    if case == "decision":
        path = root / "_tpc/ledger/epoch=e3/attempt=000001/decision.json"
        doc = json.loads(path.read_bytes())
        assert doc["outcome"] == "commit"
    else:
        path = root / "epoch=e2/_tpc_published.json"
        doc = json.loads(path.read_bytes())
        doc = {k: v for k, v in doc.items() if k not in ("files", "manifest")}
        doc["next"] = "what a later marker names instead"
    path.write_text(json.dumps({**doc, "version": doc["version"] + 1}))


def test_the_previous_release_refuses_what_it_cannot_read_cleanly(run_old, tmp_path):
    """A decision and a marker of a version v0.1.0 does not know (as a later release may
    write them: made here from this build's records, the version raised) are refused
    as damage: one error, never another attempt's rows, and nothing changed."""
    sinks = {case: Sink(str(tmp_path / case), NS) for case in ("decision", "marker")}
    for case, sink in sinks.items():
        _commit(sink, "e1")
        _commit(sink, "e2")
        _commit(sink, "e3", crash_at="commit.after_decision")
        _future(Path(sink.layout.root), case)
    before = {case: full_tree(sink) for case, sink in sinks.items()}

    old = run_old("read", {"targets": {c: s.target for c, s in sinks.items()},
                           "namespace": NS, "recover": [s.target for s in sinks.values()]})

    # An unknown decision: the data is still read through the markers (e3 is not
    # published); the ledger's views and recover refuse; e3 is not rolled forward.
    seen = old["decision"]
    assert seen["rows"] == {"ok": _rows(e1=1, e2=1)}
    assert seen["states"]["refused"] == "LedgerError"
    assert "unknown format/version" in seen["states"]["message"]
    for verb in ("status", "list"):
        _one_error(seen[verb], f"decision: {verb}")
    # An unknown marker: its epoch's rows are refused, not read as something else.
    seen = old["marker"]
    assert seen["rows"]["refused"] == "LedgerError"
    assert "epoch=e2/_tpc_published.json" in seen["rows"]["message"]
    _one_error(seen["status"], "marker: status")
    assert seen["list"]["code"] == 0  # the ledger's view does not read markers' files
    for case, sink in sinks.items():
        _one_error(old[f"recover {sink.target}"], f"{case}: recover")
    # Recover leaves the epoch it cannot read exactly as it was (and finishes the
    # others: the marker's target had e3 to roll forward).
    assert full_tree(sinks["decision"]) == before["decision"]
    assert _epoch(full_tree(sinks["marker"]), "e2") == _epoch(before["marker"], "e2")
    assert _epoch(before["marker"], "e2")


def _epoch(tree: dict, epoch: str) -> dict:
    """The part of a tree that belongs to one epoch: ledger, staging, published files."""
    return {p: v for p, v in tree.items() if f"/epoch={epoch}/" in p}
