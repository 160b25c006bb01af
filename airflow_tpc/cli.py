"""``airflow-tpc`` / ``python -m airflow_tpc``: inspect and repair a target's transactions.

    airflow-tpc list    TARGET [--epoch E] [--json]
    airflow-tpc status  TARGET [--json]
    airflow-tpc abort   TARGET --epoch E [--attempt N] [--reason TEXT]
    airflow-tpc recover TARGET [--abort-undecided] [--ignore-failures-after-timeout]
    airflow-tpc gc      TARGET

S3 endpoints and credentials come from the environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...) or ``--endpoint-url``; they are never printed.
The namespace defaults to the one the target was claimed by; acting on a target
as another namespace needs ``--allow-foreign-namespace``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from .errors import TpcError
from .ledger import check_attempt
from .sink import Sink
from .transaction import SinkConfig


def _storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """Endpoint and region for an object store (a local target has no use for them)."""
    options: dict[str, Any] = {}
    endpoint = args.endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_url"] = endpoint
    if os.environ.get("AWS_DEFAULT_REGION"):
        options["region_name"] = os.environ["AWS_DEFAULT_REGION"]
    return options or None


def open_sink(target: str, namespace: str | None, storage_options: dict[str, Any] | None,
              **config: Any) -> Sink:
    """A Sink for an existing target; the namespace defaults to the target's claim."""
    if namespace is None:
        probe = Sink(target, "_inspect", storage_options=storage_options)
        namespace = probe.claimed_namespace()
        if namespace is None:
            raise TpcError(f"{probe.target} has no airflow-tpc ledger (no _tpc/sink.json)")
    return Sink(target, namespace, storage_options=storage_options, config=SinkConfig(**config))


def _attempt(text: str) -> int:
    """argparse type of ``--attempt``: a whole number from 1 (0 never means "latest")."""
    try:
        return check_attempt(text)
    except TpcError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[("-" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def cmd_list(sink: Sink, args: argparse.Namespace) -> Any:
    infos = [i.to_dict() for i in sink.describe(args.epoch)]
    if args.json:
        return infos
    for i in infos:
        i["age"] = _age(i["age_s"])
        i["note"] = "superseded" if i["superseded"] else ("" if i["published"] or
                                                          i["state"] != "COMMITTED"
                                                          else "not yet promoted")
    return _table(infos, ["epoch", "attempt", "state", "files", "bytes", "rows", "age",
                          "staging_files", "note"]) if infos else "no transactions"


def cmd_status(sink: Sink, args: argparse.Namespace) -> Any:
    infos = sink.describe()
    committed = sink.committed_files()
    epochs: dict[str, dict[str, Any]] = {}
    for i in infos:
        e = epochs.setdefault(i.epoch, {"epoch": i.epoch, "published_attempt": None,
                                        "files": None, "rows": None, "bytes": None,
                                        "attempts": 0, "pending": 0})
        e["attempts"] += 1
        if i.state.value in ("OPEN", "PRECOMMITTED"):
            e["pending"] += 1
        if i.state.value == "COMMITTED" and not i.superseded and i.epoch in committed:
            e.update(published_attempt=i.attempt, files=i.files, rows=i.rows, bytes=i.bytes)
    doc = {"target": sink.target, "namespace": sink.namespace,
           "committed_epochs": list(committed), "epochs": list(epochs.values())}
    if args.json:
        return doc
    header = f"target {sink.target}  namespace {sink.namespace}  " \
             f"committed epochs: {len(committed)}"
    body = _table(doc["epochs"], ["epoch", "published_attempt", "files", "rows", "bytes",
                                  "attempts", "pending"]) if epochs else "no transactions"
    return f"{header}\n{body}"


def cmd_abort(sink: Sink, args: argparse.Namespace) -> Any:
    txn = sink.transaction(args.epoch, args.attempt) if args.attempt is not None \
        else sink.latest_transaction(args.epoch)
    if txn is None:
        raise TpcError(f"epoch {args.epoch} has no transaction")
    sink.abort(txn, reason=args.reason)
    return {"aborted": txn.txn_id} if args.json else f"aborted {txn.txn_id}"


def cmd_recover(sink: Sink, args: argparse.Namespace) -> Any:
    report = sink.recover(abort_undecided=args.abort_undecided,
                          ignore_failures_after_timeout=args.ignore_failures_after_timeout)
    if args.json:
        return report.to_dict()
    return (f"rolled forward: {report.rolled_forward or 'none'}\n"
            f"aborted: {report.aborted or 'none'}\n"
            f"abandoned: {report.abandoned or 'none'}\n"
            f"staging cleaned: {report.cleaned or 'none'}")


def cmd_gc(sink: Sink, args: argparse.Namespace) -> Any:
    cleaned = sink.gc()
    return {"cleaned": cleaned} if args.json else f"removed staging of {len(cleaned)} attempt(s)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="airflow-tpc", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "list": (cmd_list, "every transaction of the target"),
        "status": (cmd_status, "what is committed per epoch"),
        "abort": (cmd_abort, "abort an epoch's latest (or a given) attempt"),
        "recover": (cmd_recover, "roll decided commits forward, abort stale attempts"),
        "gc": (cmd_gc, "remove staging of finished transactions"),
    }
    for name, (fn, help_text) in commands.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(fn=fn)
        p.add_argument("target", help="target URI: /abs/path, file:///..., s3://bucket/prefix")
        p.add_argument("--namespace", help="sink namespace (default: the target's owner)")
        p.add_argument("--endpoint-url", help="S3 endpoint (default: $AWS_ENDPOINT_URL)")
        p.add_argument("--json", action="store_true", help="print JSON")
        if name in ("abort", "recover", "gc"):
            p.add_argument("--allow-foreign-namespace", action="store_true",
                           help="act on a target claimed by another namespace than --namespace")
        if name in ("list", "abort"):
            p.add_argument("--epoch", required=name == "abort")
        if name == "abort":
            p.add_argument("--attempt", type=_attempt,
                           help="the attempt to abort (default: the epoch's latest)")
            p.add_argument("--reason", default="aborted from the command line")
        if name == "recover":
            p.add_argument("--abort-undecided", action="store_true",
                           help="abort every undecided attempt (no writer is alive)")
            p.add_argument("--ignore-failures-after-timeout", action="store_true",
                           help="give up (loudly) commits that keep failing past the timeout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        config = {"allow_foreign_namespace": True} \
            if getattr(args, "allow_foreign_namespace", False) else {}
        sink = open_sink(args.target, args.namespace, _storage_options(args), **config)
        out = args.fn(sink, args)
    except TpcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1, default=str) if args.json else out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

