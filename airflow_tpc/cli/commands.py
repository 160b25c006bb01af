"""``airflow-tpc`` / ``python -m airflow_tpc``: inspect and repair a target's transactions.

    airflow-tpc list    TARGET [--epoch E] [--json]
    airflow-tpc status  TARGET [--json]
    airflow-tpc abort   TARGET --epoch E [--attempt N] [--reason TEXT]
    airflow-tpc recover TARGET [--abort-undecided] [--ignore-failures-after-timeout]
    airflow-tpc gc      TARGET
    airflow-tpc --version

TARGET is a folder (``/abs/path``, ``file:///...``, ``s3://bucket/prefix``) or a table
(``iceberg://<catalog>/<namespace>.<table>``, and the other schemes of
:mod:`airflow_tpc.tables`).  A table's catalog is given as pyiceberg names its
properties: ``--catalog-property KEY=VALUE`` (repeatable) and/or ``--catalog-config
FILE`` (JSON or YAML: the properties, or a ``.pyiceberg.yaml`` with a ``catalog:``
section); with neither, pyiceberg's own configuration is read.  Property values are
never printed.

S3 endpoints and credentials come from the environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...) or ``--endpoint-url``; they are never printed.  An
unreachable endpoint fails within seconds (``--connect-timeout``, ``--max-attempts``)
with one ``error:`` line.  ``recover`` and ``gc`` report each epoch they reach on
stderr (``--quiet``: not).  The namespace defaults to the one the target was claimed
by; acting on a target as another namespace needs ``--allow-foreign-namespace``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from .. import __version__
from ..core.sink import Progress, Sink
from ..core.units import human_bytes
from ..errors import InvalidState, TpcError
from ..storage.s3_endpoint import redact_endpoint_url
from ..tables import history as table_history
from .common import (
    ShownProblem,
    _age,
    _storage_options,
    add_command_options,
    add_store_options,
    attempt_list,
    catalog_properties,
    open_sink,
)


def _connection_error(exc: BaseException) -> BaseException | None:
    """The client's "could not connect" error behind ``exc`` (raised, cause or context)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        names = {t.__name__ for t in type(err).__mro__}
        if names & {"EndpointConnectionError", "ConnectTimeoutError"}:
            return err
        todo += [err.__cause__, err.__context__]
    return None


def _unreachable_message(exc: BaseException, args: argparse.Namespace,
                         options: dict[str, Any] | None) -> str | None:
    """One line for an endpoint that could not be reached (the endpoint shown redacted)."""
    err = _connection_error(exc)
    if err is None:
        return None
    endpoint = (options or {}).get("endpoint_url")
    where = f"the S3 endpoint {redact_endpoint_url(endpoint)}" if endpoint \
        else "the default S3 endpoint"
    detail = f" ({exc})" if isinstance(exc, TpcError) else ""
    return (f"cannot connect to {where}: {type(err).__name__} after {args.max_attempts} "
            f"attempt(s), connect timeout {args.connect_timeout:g} s{detail}. Check "
            "--endpoint-url / AWS_ENDPOINT_URL and the network.")


def _human_bytes(n: Any) -> Any:
    return human_bytes(n) if isinstance(n, int) and not isinstance(n, bool) else n


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain-text table (tabulate): numbers right-aligned, bytes human-readable,
    ``-`` for what is unknown.  ``--json`` gives the raw values."""
    from tabulate import tabulate  # the CLI's only; the job-side package never needs it

    def numeric(column: str) -> bool:
        values = [r.get(column) for r in rows if r.get(column) is not None]
        return bool(values) and all(isinstance(v, int) and not isinstance(v, bool)
                                    for v in values)

    align = ["right" if numeric(c) else "left" for c in columns]
    cells = [[_human_bytes(r.get(c)) if c.endswith("bytes") else r.get(c) for c in columns]
             for r in rows]
    return tabulate(cells, headers=[c.upper() for c in columns], tablefmt="simple",
                    missingval="-", colalign=align, disable_numparse=True)


def cmd_list(sink: Sink, args: argparse.Namespace) -> Any:
    """Every transaction.  A table target's rows also say which snapshot (Iceberg) or
    version (Delta) each commit made, and a committed attempt's files, which the table
    took where they were staged, are not counted as staging left."""
    infos = table_history.describe(sink, args.epoch)
    if args.json:
        return infos
    key = table_history.version_key(sink)
    for i in infos:
        i["age"] = _age(i["age_s"])
        # a folder's commit is where readers see it once published; a table's once the
        # table's history holds it (or it was published)
        in_table = bool(i.get("in_table")) if key else bool(i.get("published"))
        i["note"] = "superseded" if i["superseded"] else (
            ("decided, not yet in the table" if key else "not yet promoted")
            if i["state"] == "COMMITTED" and not in_table else "")
        if in_table:
            i["staging_files"] = None  # the table's data files now, not leftovers
    columns = ["epoch", "attempt", "state", "files", "bytes", "rows", "age",
               *([key] if key else []), "staging_files", "note"]
    body = _table(infos, columns) if infos else "no transactions"
    return f"{_where_line(sink)}\n{body}" if key else body


def _where_line(sink: Sink) -> str:
    """``table <uri>  location <path>`` of a table target, ``target <uri>`` of a folder."""
    table = table_history.table_uri(sink)
    return f"table {table}  location {sink.target}" if table else f"target {sink.target}"


def cmd_status(sink: Sink, args: argparse.Namespace) -> Any:
    infos = sink.describe()
    committed = sink.committed_files()
    key = table_history.version_key(sink)
    versions = table_history.table_commits(sink) if key else {}
    epochs: dict[str, dict[str, Any]] = {}
    for i in infos:
        e = epochs.setdefault(i.epoch, {"epoch": i.epoch, "published_attempt": None,
                                        **({key: None} if key else {}),
                                        "files": None, "rows": None, "bytes": None,
                                        "attempts": 0, "pending": 0})
        e["attempts"] += 1
        if i.state.value in ("OPEN", "PRECOMMITTED"):
            e["pending"] += 1
        if i.state.value == "COMMITTED" and not i.superseded and i.epoch in committed:
            e.update(published_attempt=i.attempt, files=i.files, rows=i.rows, bytes=i.bytes)
            if key:
                e[key] = versions.get(i.txn_id)
    lost = sink.lost_group_attempts()
    doc = {**table_history.where(sink), "namespace": sink.namespace,
           "committed_epochs": list(committed), "epochs": list(epochs.values()),
           "lost_group_attempts": [x.to_dict() for x in lost]}
    header = f"{_where_line(sink)}  namespace {sink.namespace}  committed epochs: " \
             f"{len(committed)}"
    body = _table(doc["epochs"], ["epoch", "published_attempt", *([key] if key else []),
                                  "files", "rows", "bytes", "attempts", "pending"]) \
        if epochs else "no transactions"
    shown = doc if args.json else f"{header}\n{body}" + "".join(
        f"\nLOST GROUP ATTEMPT: {x.problem}" for x in lost)
    if lost:  # shown, and a non-zero exit: nobody will decide these attempts
        raise ShownProblem(f"{len(lost)} member attempt(s) of {sink.target} name a group "
                           f"attempt their group folder does not hold; first: "
                           f"{lost[0].problem}", shown)
    return shown


def cmd_abort(sink: Sink, args: argparse.Namespace) -> Any:
    txn = sink.transaction(args.epoch, args.attempt) if args.attempt is not None \
        else sink.latest_transaction(args.epoch)
    if txn is None:
        raise TpcError(f"epoch {args.epoch} has no transaction")
    if args.dry_run:
        return _abort_plan(sink, txn, args.json)
    sink.abort(txn, reason=args.reason)
    return {"aborted": txn.txn_id} if args.json else f"aborted {txn.txn_id}"


def _abort_plan(sink: Sink, txn: Any, as_json: bool) -> Any:
    """What ``abort`` would do to ``txn``, from the ledger's state; nothing is written.
    A COMMITTED attempt is refused as the real abort refuses it."""
    found = [i for i in sink.describe(txn.epoch) if i.attempt == txn.attempt]
    state = str(found[0].state) if found else "OPEN"
    if state == "COMMITTED":
        raise InvalidState(f"cannot abort {txn.txn_id}: it is COMMITTED (use a new run of "
                           "the epoch to replace its output)")
    done = state in ("ABORTED", "EXPIRED")
    if as_json:
        return {"dry_run": True, "txn_id": txn.txn_id, "state": state,
                "would_abort": None if done else txn.txn_id}
    if done:
        return f"dry run: {txn.txn_id} is already {state}; abort would change nothing"
    what = " and discard its sealed output" if state == "PRECOMMITTED" else ""
    return f"dry run: would abort {txn.txn_id} ({state}){what}; nothing was changed"


def cmd_recover(sink: Sink, args: argparse.Namespace) -> Any:
    report = sink.recover(abort_undecided=args.abort_undecided,
                          ignore_failures_after_timeout=args.ignore_failures_after_timeout,
                          progress=_progress(args), dry_run=args.dry_run)
    staged = _staged(sink, report) if args.dry_run else {}
    if args.json:
        doc = report.to_dict()
        if args.dry_run:  # what the aborts and cleaning would throw away, per attempt
            doc["would_discard"] = [{"epoch": e, "attempt": a, **staged[(e, a)]}
                                    for e, a, *_ in [*report.aborted, *report.cleaned]
                                    if (e, a) in staged]
        return doc

    def discards(epoch: str, attempt: int) -> str:
        s = staged.get((epoch, attempt))
        if not s:
            return ""
        staged_ = f"{s['staging_files']} staged file(s), {human_bytes(s['staging_bytes'])}"
        if s["state"] == "PRECOMMITTED":
            return (f"PRECOMMITTED, would discard its sealed output of {s['files']} file(s), "
                    f"{human_bytes(s['bytes'])} ({staged_} in all)")
        return f"{s['state']}, would remove {staged_}"

    lists = [attempt_list("roll forward" if args.dry_run else "rolled forward",
                          report.rolled_forward),
             attempt_list("abort" if args.dry_run else "aborted", report.aborted, discards)]
    if not args.dry_run:
        lists.append(attempt_list("abandoned", report.abandoned))
    lists.append(attempt_list("clean staging of" if args.dry_run else "staging cleaned",
                              report.cleaned, discards))
    head = ["dry run: nothing was changed; recover would"] if args.dry_run else []
    return "\n".join(head + lists)


def _staged(sink: Sink, report: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """The state, the sealed output (``files``, ``bytes``: None unless pre-committed) and
    what is really staged (``staging_files``, ``staging_bytes``) of each attempt a dry run
    of recover would abort or clean: read from the ledger and staging, nothing written."""
    wanted = {(e, a) for e, a, *_ in [*report.aborted, *report.cleaned]}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for epoch in sorted({e for e, _ in wanted}):
        for i in sink.describe(epoch):
            if (i.epoch, i.attempt) in wanted:
                out[(i.epoch, i.attempt)] = {"state": str(i.state), "files": i.files,
                                             "bytes": i.bytes,
                                             "staging_files": i.staging_files,
                                             "staging_bytes": i.staging_bytes}
    return out


def cmd_gc(sink: Sink, args: argparse.Namespace) -> Any:
    cleaned = sink.gc(progress=_progress(args), dry_run=args.dry_run)
    if args.json:
        return {"cleaned": cleaned, "dry_run": True} if args.dry_run else {"cleaned": cleaned}
    if args.dry_run:
        return ("dry run: nothing was changed; gc would\n"
                + attempt_list("remove staging of", cleaned))
    return attempt_list("removed staging of", cleaned)


def _progress(args: argparse.Namespace) -> Progress | None:
    """``<command>: epoch <E> (<k>/<n>)`` on stderr as a long command reaches each epoch
    (stdout keeps the result); none with ``--quiet``."""
    if args.quiet:
        return None

    def report(epoch: str, k: int, n: int) -> None:
        print(f"{args.command}: epoch {epoch} ({k}/{n})", file=sys.stderr, flush=True)

    return report





#: name -> (function, one-line help, description)
COMMANDS = {
    "list": (cmd_list, "every transaction of the target",
             "Every transaction (epoch, attempt) of the target: state, files, bytes, rows, "
             "age, staging left. Reads only."),
    "status": (cmd_status, "what is committed per epoch",
               "Per epoch: the attempt readers see, its files, rows and bytes, how many "
               "attempts there were and how many are still undecided. Reads only."),
    "abort": (cmd_abort, "abort an epoch's latest (or a given) attempt",
              "Abort one attempt of an epoch: its staging is deleted and a job still "
              "running from it can never pre-commit. A COMMITTED attempt is refused."),
    "recover": (cmd_recover, "roll decided commits forward, abort stale attempts",
                "What a restart does: finish every decided commit (roll forward), abort "
                "superseded and expired attempts, remove staging of finished ones. "
                "Reports each epoch it reaches on stderr."),
    "gc": (cmd_gc, "remove staging of finished transactions",
           "Remove staging left by finished (committed or aborted) transactions. Reports "
           "each epoch it reaches on stderr."),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-tpc", description=__doc__.split("\n")[0],
        epilog="Run 'airflow-tpc COMMAND --help' for a command's options. Exit codes: 0 done, "
               "2 refused or failed (one 'error:' line on stderr).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands", help="what to do with TARGET")
    for name, (fn, help_text, description) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=description)
        p.set_defaults(fn=fn)
        p.add_argument("target", help="target URI: /abs/path, file:///..., s3://bucket/prefix, "
                                      "or a table: iceberg://<catalog>/<namespace>.<table>")
        p.add_argument("--namespace", help="sink namespace (default: the one that claimed the "
                                           "target)")
        add_command_options(p, name, group=False, dry_run=("abort", "recover", "gc"),
                            attempt_help="the attempt to abort (default: the epoch's latest)")
        add_store_options(p, group=False, ledger_uri={
            "metavar": "URI", "help": "the table's ledger, kept apart from the table (as the "
            "pipeline's ledger_uri): managed table storage, REST catalogs"})
        if name in ("recover", "gc"):
            p.add_argument("-q", "--quiet", action="store_true",
                           help="no progress lines (epoch reached) on stderr")
        if name == "list":
            p.add_argument("--epoch", help="only this epoch's transactions")
    from .group import add_group_parser  # `airflow-tpc group ...`: a group, not a TARGET

    add_group_parser(parser, sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    options = _storage_options(args)
    try:
        config = {"allow_foreign_namespace": True} \
            if getattr(args, "allow_foreign_namespace", False) else {}
        sink = None if args.command == "group" else open_sink(  # a group opens its own
            args.target, args.namespace, options, catalog_properties(args),
            getattr(args, "ledger_uri", None), **config)
        out = args.fn(sink, args)
    except Exception as exc:
        if isinstance(exc, ShownProblem):  # the output, then what needs an operator
            print(json.dumps(exc.output, indent=1, default=str) if args.json else exc.output)
        message = _unreachable_message(exc, args, options)
        if message is None and not isinstance(exc, TpcError):
            raise
        print(f"error: {message or exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1, default=str) if args.json else out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
