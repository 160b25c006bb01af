"""Run by the PREVIOUS release's code (``PYTHONPATH=<extracted v0.1.0 tree>``), never
imported by the tests: it writes real targets the way that release writes them, or
reads targets this build wrote, and prints one JSON document on stdout.

    python old_build.py <old tree> <scenario> '<spec as JSON>'

It uses only the API of v0.1.0 (and pyarrow, boto3), so it keeps working however
this build changes.  Each scenario is one process (one Python start for a whole
group of records).  A crash is either the old build's own fault injection
(``faults.armed``: an exception at a named step) or, for the last record of a
scenario, a real death at the step (``os._exit(137)``: no handler, no cleanup).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Any

OLD_TREE, SCENARIO, SPEC = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import airflow_tpc  # noqa: E402
from airflow_tpc import Group, Sink, SinkConfig, TpcError  # noqa: E402
from airflow_tpc.faults import InjectedCrash, armed  # noqa: E402

# The whole point: this process runs the old tree's code, not this build's.
assert os.path.realpath(airflow_tpc.__file__).startswith(os.path.realpath(OLD_TREE) + os.sep), \
    airflow_tpc.__file__


def parquet(epoch: str, attempt: int, member: str = "", table: bool = False) -> bytes:
    """One Parquet file whose every row names the attempt that wrote it (``tag``)."""
    tag = f"{member}{epoch}@{attempt}"
    cols = {"id": pa.array([1, 2], pa.int64()), "tag": pa.array([tag, tag], pa.string())}
    if table:  # a table's epoch column, which the job adds (txn.with_epoch_column)
        cols["epoch"] = pa.array([epoch, epoch], pa.string())
    out = pa.BufferOutputStream()
    pq.write_table(pa.table(cols), out)
    return out.getvalue().to_pybytes()


def stage(sink: Sink, epoch: str, *, member: str = "", table: bool = False,
          txn: Any = None, precommit: bool = True) -> tuple[Any, str | None]:
    """Begin (unless given), write one data file into staging, pre-commit."""
    txn = txn or sink.begin(epoch)
    staging = sink.layout.staging(txn.epoch, txn.attempt)
    sink.storage.put(sink.storage.join(staging, "part-0.parquet"),
                     parquet(txn.epoch, txn.attempt, member, table))
    return txn, (sink.precommit(txn).digest if precommit else None)


def crashed(step: str, call: Any) -> None:
    """``call()`` crashing at ``step`` (the old build's fault injection)."""
    with armed(step):
        try:
            call()
        except InjectedCrash:
            return
    raise AssertionError(f"never reached {step}")


def die_at(step: str, call: Any) -> None:
    """``call()`` killed for real at ``step``: the process ends there, exit 137."""
    print(json.dumps(OUT), flush=True)  # what was written so far, before dying
    with armed(step, lambda _name: os._exit(137)):
        call()
    raise AssertionError(f"never reached {step}")


OUT: dict[str, Any] = {"version": airflow_tpc.__version__}


def folder(spec: dict[str, Any]) -> None:
    """One folder target (local or S3), every state a release leaves behind:
    e1 published; e2 re-run (a2 replaced a1; a3 aborted); e3 a re-run decided and
    crashed mid-promotion; e4 pre-committed, undecided; e5 aborted; e6 an abort
    crashed after its decision; e7 the first commit killed right after its decision.
    Without ``full`` (the key cases only, on a slow store), no e2 and no e6."""
    opts = spec.get("storage_options")
    config = SinkConfig(promotion=spec.get("promotion", "move"))

    def sink() -> Sink:
        return Sink(spec["target"], spec["namespace"], storage_options=opts, config=config)

    s = sink()
    digests: dict[str, str | None] = {}
    txn, d = stage(s, "e1")
    s.commit(txn, expected_digest=d)
    if spec["full"]:
        for _ in range(2):
            txn, d = stage(s, "e2")
            s.commit(txn, expected_digest=d)
        txn, _ = stage(s, "e2")
        s.abort(txn)
    txn, d = stage(s, "e3")
    s.commit(txn, expected_digest=d)
    txn, d = stage(s, "e3")
    crashed(spec["mid_promotion_step"], lambda: sink().commit(txn, expected_digest=d))
    txn, digests["e4"] = stage(s, "e4")
    txn, _ = stage(s, "e5")
    s.abort(txn)
    if spec["full"]:
        txn, _ = stage(s, "e6")
        crashed("abort.after_decision", lambda: sink().abort(txn))
    OUT["digests"] = digests
    txn, d = stage(s, "e7")
    die_at("commit.after_decision", lambda: sink().commit(txn, expected_digest=d))


def group(spec: dict[str, Any]) -> None:
    """A group of two folder members: g1 published; g2 decided, crashed after its first
    member switched; g3 pre-committed, undecided; g4 aborted."""
    opts = spec.get("storage_options")

    def grp() -> Group:
        sinks = {n: Sink(t, spec["namespace"], storage_options=opts)
                 for n, t in spec["members"].items()}
        return Group(sinks, spec["group"], storage_options=opts)

    def staged(g: Group, epoch: str) -> Any:
        gtxn = g.begin(epoch)
        for name, sink in g.sinks.items():
            stage(sink, epoch, member=f"{name}:", txn=gtxn.member(name), precommit=False)
        g.precommit(gtxn)
        return gtxn

    g = grp()
    g.commit(staged(g, "g1"))
    gtxn = staged(g, "g2")
    crashed("group.after_member", lambda: grp().commit(gtxn))
    staged(g, "g3")
    g.abort(staged(g, "g4"))


def tables(spec: dict[str, Any]) -> None:
    """An Iceberg table (SQL catalog) and a Delta table: t1 published; t2 decided, killed
    (exception) right after the decision; t3 pre-committed, undecided."""
    from airflow_tpc.tables import open_sink

    digests = {}
    for kind, target in spec["targets"].items():
        def sink(target: str = target) -> Sink:
            return open_sink(target, spec["namespace"],
                             catalog_properties=spec.get("catalog_properties"))
        s = sink()
        txn, d = stage(s, "t1", table=True)
        s.commit(txn, expected_digest=d)
        txn, d = stage(s, "t2", table=True)
        crashed("commit.after_decision",
                lambda txn=txn, d=d, sink=sink: sink().commit(txn, expected_digest=d))
        _, digests[kind] = stage(s, "t3", table=True)
    OUT["digests"] = digests


def read(spec: dict[str, Any]) -> None:
    """The old build as a READER of targets this build wrote: per target, every
    committed epoch's rows (through the markers), every attempt's state, and the CLI's
    ``status``/``list``; a refusal is reported as its class and message.  ``recover``:
    targets the old CLI's ``recover`` is run on (to see it refuse what it cannot read)."""
    from airflow_tpc.cli import main

    def attempt(what: str, call: Any) -> dict[str, Any]:
        try:
            return {"ok": call()}
        except TpcError as exc:
            return {"refused": type(exc).__name__, "message": str(exc)}

    def rows(sink: Sink) -> dict[str, list[str]]:
        out = {}
        for epoch, uris in sink.committed_files().items():
            tags: list[str] = []
            for uri in uris:
                path = uri.split("://", 1)[1] if uri.startswith("s3://") else uri[7:]
                tags += pq.read_table(pa.BufferReader(sink.storage.read_bytes(path)))[
                    "tag"].to_pylist()
            out[epoch] = sorted(set(tags))
        return out

    def cli(*argv: str) -> dict[str, Any]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

    opts = spec.get("storage_options")
    for name, target in spec["targets"].items():
        s = Sink(target, spec["namespace"], storage_options=opts)
        OUT[name] = {
            "rows": attempt("rows", lambda s=s: rows(s)),
            "states": attempt("states", lambda s=s: {
                f"{i.epoch}/{i.attempt}": i.state.value for i in s.describe()}),
            "status": cli("status", target, "--json"),
            "list": cli("list", target, "--json"),
        }
    for target in spec.get("recover", []):  # the old build as a writer: recover
        OUT["recover " + target] = cli("recover", target, "--quiet", "--json")
    if "group" in spec:
        def stable() -> dict[str, int]:
            sinks = {n: Sink(spec["targets"][n], spec["namespace"], storage_options=opts)
                     for n in spec["members"]}
            return Group(sinks, spec["group"], storage_options=opts).stable_epochs()
        OUT["group"] = attempt("stable", stable)


{"folder": folder, "group": group, "tables": tables, "read": read}[SCENARIO](SPEC)
print(json.dumps(OUT), flush=True)
