"""``airflow-tpc group ...``: inspect and repair a group transaction (:mod:`airflow_tpc.group`).

    airflow-tpc group status  GROUP --member NAME=TARGET ... [--epoch E] [--json]
    airflow-tpc group recover GROUP --member NAME=TARGET ... [--abort-undecided] [--json]
    airflow-tpc group abort   GROUP --member NAME=TARGET ... --epoch E --attempt N [--reason R]

GROUP is the group's own folder.  A group is named by that folder, its members
(``--member NAME=TARGET``, once per member: exactly the members its ``_tpc/group.json``
records, as a group's members never change) and its namespace (``--namespace``,
default: the one the group was created by).  Each member is opened as the
single-target commands open a TARGET, with the same S3 and catalog options, so table
members work too; a table member whose ledger lies apart takes ``--ledger-uri
NAME=URI``.  Errors are one ``error:`` line and exit code 2, as in :mod:`airflow_tpc.cli`.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..core.group_records import MEMBER_RE
from ..core.layout import TPC_DIR
from ..core.records import DECISION
from ..core.sink import Sink
from ..errors import InvalidState, LedgerError, TpcError
from ..group.claim import (
    GROUP_CLAIM,
    check_member_names,
    check_members,
    check_namespace,
    read_group_claim,
)
from ..group.group import Group, GroupAbort, GroupCommit
from ..storage import open_storage
from .common import (
    _is_table,
    _storage_options,
    add_command_options,
    add_store_options,
    attempt_list,
    catalog_properties,
    open_sink,
)
from .group_status import (  # noqa: F401 - describe_group: the UI reads it from here
    _names,
    _stable,
    _stable_line,
    cmd_status,
    describe_group,
)


# ------------------------------------------------------------------ arguments
def _pair(option: str, what: str, meaning: str) -> Any:
    """argparse type of ``--member NAME=TARGET`` / ``--ledger-uri NAME=URI``."""
    def parse(text: str) -> tuple[str, str]:
        name, eq, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value:
            raise argparse.ArgumentTypeError(
                f"{option} takes NAME={what} (a member's name, '=', {meaning}), not {text!r}")
        if not MEMBER_RE.fullmatch(name):
            raise argparse.ArgumentTypeError(
                f"invalid member name {name!r}: letters, digits, '_' and '-', starting with a "
                "letter or digit, at most 64")
        return name, value
    parse.__name__ = f"NAME={what}"
    return parse


def _by_name(pairs: list[tuple[str, str]] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in pairs or []:
        if name in out:
            raise TpcError(f"{option} names member {name!r} twice")
        out[name] = value
    return out


# ------------------------------------------------------------------ opening
def open_group(args: argparse.Namespace, options: dict[str, Any] | None, *,
               read_only: bool = False) -> Group:
    """The Group named by the command line, checked against its claim (``group.json``):
    the same namespace, the same member names, each naming the same target."""
    members = _by_name(args.member, "--member")
    ledger_uris = _by_name(args.ledger_uri, "--ledger-uri")
    unknown = sorted(set(ledger_uris) - set(members))
    if unknown:
        raise TpcError(f"--ledger-uri names {', '.join(map(repr, unknown))}, which no --member "
                       "names")
    storage, root = open_storage(args.group, options)
    uri = storage.uri(root).rstrip("/")
    claim = read_group_claim(storage, root)
    if claim is None:
        _refuse_if_lost(args, options, uri, members, ledger_uris)
        raise TpcError(f"{uri} holds no airflow-tpc group (no {TPC_DIR}/{GROUP_CLAIM}; a "
                       "group's folder is claimed by its first begin)")
    namespace = claim["namespace"]
    if args.namespace is not None:
        check_namespace(uri, claim, args.namespace, "omit --namespace to use the group's own")
    claimed = claim["members"]
    # The names before any member is opened (a table member opens its catalog); the
    # targets once they are (a member's URI as its sink spells it).
    check_member_names(uri, claimed, members, given_as="the --member options name")
    config = {"allow_foreign_namespace": True} \
        if read_only or getattr(args, "allow_foreign_namespace", False) else {}
    # The catalog options are pyiceberg's: for the Iceberg members (each its own catalog's
    # from a .pyiceberg.yaml); Delta members take them (delta-rs storage options, as the
    # single-target commands give them) only in a group without Iceberg members.
    iceberg = any(t.startswith("iceberg://") for t in members.values())
    sinks: dict[str, Sink] = {}
    for name, target in sorted(members.items()):
        catalog = catalog_properties(argparse.Namespace(**{**vars(args), "target": target})) \
            if target.startswith("iceberg://") or (_is_table(target) and not iceberg) else None
        sinks[name] = open_sink(target, namespace, options, catalog, ledger_uris.get(name),
                                **config)
    check_members(uri, claimed, {n: s.target for n, s in sinks.items()},
                  given_as="the --member options name",
                  spelled={n: f"--member {n}={t}" for n, t in members.items()})
    return Group(sinks, args.group, storage_options=options)


def _refuse_if_lost(args: argparse.Namespace, options: dict[str, Any] | None, uri: str,
                    members: dict[str, str], ledger_uris: dict[str, str]) -> None:
    """A folder with no group claim that the members' attempts name as their group: the
    group's folder was lost.  Said loudly (LedgerError), with the attempts nobody will
    decide now, instead of "no group here"."""
    lost = []
    for name, target in sorted(members.items()):
        try:
            catalog = catalog_properties(argparse.Namespace(**{**vars(args), "target": target})) \
                if _is_table(target) else None
            sink = open_sink(target, args.namespace, options, catalog,
                             ledger_uris.get(name), allow_foreign_namespace=True)
            lost += [x for x in sink.lost_group_attempts() if x.group.rstrip("/") == uri]
        except TpcError:
            continue  # a member that cannot be opened: the plain refusal below says enough
    if lost:
        raise LedgerError(f"{uri} holds no airflow-tpc group, but {len(lost)} member "
                          f"attempt(s) name it as their group; first: {lost[0].problem}")


def run(_sink: None, args: argparse.Namespace) -> Any:
    """What ``airflow-tpc group ...`` runs (cli.main opens no single target for it)."""
    options = _storage_options(args)
    group = open_group(args, options, read_only=args.group_command == "status")
    return args.group_fn(group, args)


# ------------------------------------------------------------------ recover, abort
def cmd_recover(group: Group, args: argparse.Namespace) -> Any:
    report = group.recover(abort_undecided=args.abort_undecided,
                           ignore_failures_after_timeout=args.ignore_failures_after_timeout,
                           dry_run=args.dry_run)
    stable = _stable(group)
    if args.json:
        return {**dataclasses.asdict(report), "stable_epochs": stable}
    if args.dry_run:  # the plan, printed: what the real recover then does
        return "\n".join(["dry run: nothing was changed; group recover would",
                          attempt_list("roll forward", report.rolled_forward),
                          attempt_list("abort", report.aborted),
                          f"steps on the members ({len(report.finishing)}):",
                          *(f"  {step}" for step in report.finishing)])
    return "\n".join([attempt_list("rolled forward", report.rolled_forward),
                      attempt_list("aborted", report.aborted),
                      f"stable epochs: {_stable_line(stable)}"])


def cmd_abort(group: Group, args: argparse.Namespace) -> Any:
    gtxn = group.transaction(args.epoch, args.attempt)
    decision = group.ledger.read(gtxn.epoch, gtxn.attempt, DECISION)
    if isinstance(decision, GroupCommit):  # refused before anything is written
        raise InvalidState(f"cannot abort group {gtxn.txn_id}: it is COMMITTED, a final "
                           "decision for every member (a new run of the epoch replaces its "
                           "output); nothing was changed")
    made = group.abort(gtxn, reason=args.reason)
    if args.json:
        return {"aborted": gtxn.txn_id, "decided_now": made, "members": sorted(group.sinks)}
    if made:
        return f"aborted group {gtxn.txn_id} on every member ({', '.join(group.sinks)})"
    state = "EXPIRED" if isinstance(decision, GroupAbort) and decision.expired else "ABORTED"
    return (f"group {gtxn.txn_id} was already {state}; its abort is carried out on every "
            f"member ({', '.join(group.sinks)})")


# ------------------------------------------------------------------ parser
#: name -> (function, one-line help, description)
GROUP_COMMANDS = {
    "status": (cmd_status, "every group attempt, each member's state, the stable epochs",
               "Every group attempt (epoch, attempt, state OPEN/PRECOMMITTED/COMMITTED/"
               "ABORTED/EXPIRED, published on every member or not), each member's own "
               "state of it, and the stable epochs (every member switched to the epoch's "
               "winning group attempt: what Group.stable_epochs() readers see). Reads only."),
    "recover": (cmd_recover, "finish decided group attempts, abort stale ones",
                "What a restart does: switch every member of each decided group commit "
                "(roll forward), carry out decided aborts, abort undecided group attempts "
                "that are superseded or expired (--abort-undecided: all of them), then each "
                "member's own recover."),
    "abort": (cmd_abort, "abort one group attempt on every member",
              "Decide abort for one group attempt and carry it out on every member (their "
              "staging is deleted; a job still running from it can never pre-commit). A "
              "COMMITTED group attempt is refused, and nothing is changed."),
}


def add_group_parser(parser: argparse.ArgumentParser, sub: Any) -> None:
    """Add ``group`` to the CLI's commands (``sub``: its sub-parsers).  It takes a group,
    not a TARGET, so it is not among ``cli.COMMANDS`` (which all take one)."""
    gp = sub.add_parser(
        "group", help="a group transaction (several targets, one decision): status, "
        "recover, abort",
        description="Inspect and repair a group transaction: one epoch of several "
        "targets, all or nothing (docs/groups.md). A group is named by its own folder, "
        "its members (--member NAME=TARGET, each of them) and its namespace.",
        epilog="Run 'airflow-tpc group COMMAND --help' for a command's options. Exit codes: "
               "0 done, 2 refused or failed (one 'error:' line on stderr).")
    gp.set_defaults(fn=run)
    gsub = gp.add_subparsers(dest="group_command", required=True, metavar="COMMAND",
                             title="commands", help="what to do with the group")
    for name, (fn, help_text, description) in GROUP_COMMANDS.items():
        p = gsub.add_parser(name, help=help_text, description=description)
        p.set_defaults(group_fn=fn)
        p.add_argument("group", help="the group's own folder: /abs/path, file:///..., "
                                     "s3://bucket/prefix")
        p.add_argument("--member", action="append", required=True,
                       type=_pair("--member", "TARGET", "its target"), metavar="NAME=TARGET",
                       help="a member: its name in the group and its target (a folder or a "
                            "table URI, as the single-target commands take it); once per "
                            "member, every member of the group")
        p.add_argument("--namespace", help="the group's namespace (default: the one that "
                                           "created the group)")
        add_command_options(p, name, group=True, dry_run=("recover",),
                            attempt_help="the group attempt to abort")
        add_store_options(p, group=True, ledger_uri={
            "action": "append", "metavar": "NAME=URI",
            "type": _pair("--ledger-uri", "URI", "its ledger URI"),
            "help": "a table member's ledger, kept apart from the table (repeatable)"})
        if name == "status":
            p.add_argument("--epoch", help="only this epoch's group attempts")
    parser.epilog = f"{parser.epilog or ''} A group of targets (one epoch, many targets): " \
                    "'airflow-tpc group --help'.".strip()
