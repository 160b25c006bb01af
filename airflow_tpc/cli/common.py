"""What every ``airflow-tpc`` command shares: the store's client budget and options, a
table's catalog properties, opening an existing target's sink, and argument types.
(:mod:`airflow_tpc.cli` holds the single-target commands, :mod:`airflow_tpc.cli.group`
the group ones.)"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..core.layout import check_attempt
from ..core.sink import Sink
from ..core.transaction import SinkConfig
from ..errors import TpcError
from ..storage import open_storage

#: The CLI's S3 client budget (the library's defaults suit long-running tasks: 10 attempts,
#: 10 s connect timeout, which made an unreachable endpoint a minute and more of silence).
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
MAX_ATTEMPTS = 3


def _storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """Endpoint, region and client budget for an object store (a local target ignores them)."""
    options: dict[str, Any] = {"connect_timeout": args.connect_timeout,
                               "read_timeout": args.read_timeout,
                               "max_attempts": args.max_attempts}
    endpoint = args.endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_url"] = endpoint
    if os.environ.get("AWS_DEFAULT_REGION"):
        options["region_name"] = os.environ["AWS_DEFAULT_REGION"]
    return options


def catalog_properties(args: argparse.Namespace) -> dict[str, str] | None:
    """A table target's catalog properties from ``--catalog-config`` and
    ``--catalog-property`` (the latter win); None when neither is given."""
    props: dict[str, str] = {}
    if getattr(args, "catalog_config", None):
        props.update(_read_catalog_config(args.catalog_config, args.target))
    for item in getattr(args, "catalog_property", None) or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise TpcError(f"--catalog-property takes KEY=VALUE, not {key.strip()!r}")
        props[key.strip()] = value
    return props or None


def _read_catalog_config(path: str, target: str) -> dict[str, str]:
    """Properties from a JSON or YAML file: a flat mapping, or pyiceberg's own
    ``.pyiceberg.yaml`` shape (``catalog: {<name>: {...}}``, the target's catalog taken)."""
    from urllib.parse import urlsplit

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise TpcError(f"cannot read --catalog-config {path}: {exc.strerror}") from None
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml

            doc = yaml.safe_load(text)
        else:
            doc = json.loads(text)
    except Exception as exc:
        raise TpcError(f"--catalog-config {path} is not valid "
                       f"{'YAML' if path.endswith(('.yaml', '.yml')) else 'JSON'}: "
                       f"{type(exc).__name__}") from None
    if isinstance(doc, dict) and isinstance(doc.get("catalog"), dict):
        name = urlsplit(target).netloc
        doc = doc["catalog"].get(name)
        if doc is None:
            raise TpcError(f"--catalog-config {path} has no catalog {name!r} under 'catalog:'")
    if not isinstance(doc, dict) or any(isinstance(v, (dict, list)) for v in doc.values()):
        raise TpcError(f"--catalog-config {path} must hold a mapping of catalog properties "
                       "(strings)")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in doc.items() if v is not None}


def _is_table(target: str) -> bool:
    from ..tables import TABLE_SCHEMES

    return target.startswith(TABLE_SCHEMES)


def open_sink(target: str, namespace: str | None, storage_options: dict[str, Any] | None,
              catalog: dict[str, str] | None = None, ledger_uri: str | None = None,
              **config: Any) -> Sink:
    """A Sink for an existing target; the namespace defaults to the target's claim.

    A table target goes through :func:`airflow_tpc.tables.open_sink` (its catalog is
    opened: a missing table library or an unreachable catalog is one ``TpcError``)."""
    sink_config = SinkConfig(**config)
    if _is_table(target):
        from ..tables import open_sink as open_any

        try:
            probe = open_any(target, "_inspect", storage_options=storage_options,
                             catalog_properties=catalog, ledger_uri=ledger_uri)
        except ImportError as exc:  # the table library is an optional extra
            raise TpcError(f"{target} is a table target, and its library is not installed "
                           f"({exc.name or exc}): pip install 'airflow-tpc[tables]'") from None
        owner = probe.claimed_namespace()
        if owner is None:
            hint = "" if ledger_uri else " (a table whose ledger lies apart: pass --ledger-uri)"
            raise TpcError(f"{target} has no airflow-tpc ledger (no _tpc/sink.json at "
                           f"{probe.target}){hint}")
        if namespace is not None and namespace != owner \
                and not sink_config.allow_foreign_namespace:
            raise TpcError(f"{target} belongs to namespace {owner!r}, not {namespace!r}: "
                           "omit --namespace to use the target's own (abort, recover and gc "
                           "take --allow-foreign-namespace to act as another namespace)")
        return open_any(target, namespace or owner, storage_options=storage_options,
                        catalog_properties=catalog, config=sink_config, ledger_uri=ledger_uri)
    if catalog or ledger_uri:
        raise TpcError(f"--catalog-property/--catalog-config/--ledger-uri given for {target}, "
                       "which is a folder, not a table")
    storage = open_storage(target, storage_options, copy_workers=sink_config.copy_workers)[0]
    probe = Sink(target, "_inspect", storage=storage)
    owner = probe.claimed_namespace()
    if owner is None:
        raise TpcError(f"{probe.target} has no airflow-tpc ledger (no _tpc/sink.json)")
    if namespace is not None and namespace != owner and not sink_config.allow_foreign_namespace:
        raise TpcError(f"{probe.target} belongs to namespace {owner!r}, not {namespace!r}: "
                       "omit --namespace to use the target's own (abort, recover and gc "
                       "take --allow-foreign-namespace to act as another namespace)")
    return Sink(target, namespace or owner, storage=storage, config=sink_config)


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


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
        return value
    parse.__name__ = kind.__name__
    return parse


def add_s3_options(p: argparse.ArgumentParser) -> None:
    """The S3 options every command that opens a store takes (a TARGET's, a group's)."""
    s3 = p.add_argument_group("S3 (credentials from AWS_* environment variables)")
    s3.add_argument("--endpoint-url", help="S3 endpoint (default: $AWS_ENDPOINT_URL)")
    s3.add_argument("--connect-timeout", type=_positive(float), default=CONNECT_TIMEOUT_S,
                    metavar="SECONDS",
                    help=f"give up connecting to S3 after this long (default "
                         f"{CONNECT_TIMEOUT_S:g})")
    s3.add_argument("--read-timeout", type=_positive(float), default=READ_TIMEOUT_S,
                    metavar="SECONDS",
                    help=f"give up waiting for an S3 answer after this long (default "
                         f"{READ_TIMEOUT_S:g})")
    s3.add_argument("--max-attempts", type=_positive(int), default=MAX_ATTEMPTS, metavar="N",
                    help=f"attempts per S3 request, first one included (default "
                         f"{MAX_ATTEMPTS})")


#: The words the shared options use for a single target and for a group.
_OPTION_WORDS = {
    False: {"foreign": "a target claimed by another namespace than --namespace",
            "undecided": "undecided attempt", "failing": "commits"},
    True: {"foreign": "members claimed by another namespace than the group's",
           "undecided": "undecided group attempt", "failing": "member commits"},
}


def add_command_options(p: argparse.ArgumentParser, command: str, *, group: bool,
                        dry_run: tuple[str, ...], attempt_help: str) -> None:
    """The options a single-target command and its ``group`` counterpart share, spelled
    once: ``--json`` everywhere; ``--allow-foreign-namespace`` where something changes;
    ``--dry-run`` on the commands in ``dry_run``; recover's repair switches; abort's
    epoch, attempt and reason (a single target's attempt defaults to the latest, a
    group's must be named: its attempts are numbered apart from any member's)."""
    words = _OPTION_WORDS[group]
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    if command in ("abort", "recover", "gc"):
        p.add_argument("--allow-foreign-namespace", action="store_true",
                       help=f"act on {words['foreign']}")
    if command in dry_run:
        p.add_argument("--dry-run", action="store_true",
                       help="print what would change and change nothing")
    if command == "recover":
        p.add_argument("--abort-undecided", action="store_true",
                       help=f"abort every {words['undecided']} (no writer is alive)")
        p.add_argument("--ignore-failures-after-timeout", action="store_true",
                       help=f"give up (loudly) {words['failing']} that keep failing past "
                            "the timeout")
    if command == "abort":
        p.add_argument("--epoch", required=True, help="the epoch of the attempt to abort")
        p.add_argument("--attempt", type=_attempt, required=group, help=attempt_help)
        p.add_argument("--reason", default="aborted from the command line",
                       help="recorded in the abort decision (default: %(default)r)")


def attempt_list(title: str, items: list[tuple[Any, ...]],
                 detail: Any = None) -> str:
    """A report's list of attempts as text: ``title: none``, or ``title (n):`` and one
    indented line per attempt (``epoch E  attempt A``, its reason when it has one, and
    after a colon what ``detail(epoch, attempt)`` adds), never a Python tuple's repr."""
    if not items:
        return f"{title}: none"
    lines = [f"{title} ({len(items)}):"]
    for item in items:
        epoch, attempt, *rest = item
        line = f"  epoch {epoch}  attempt {attempt}"
        if rest:
            line += f"  ({rest[0]})"
        extra = detail(epoch, attempt) if detail else ""
        if extra:
            line += f": {extra}"
        lines.append(line)
    return "\n".join(lines)


class ShownProblem(TpcError):
    """A command's output is shown (stdout) and still needs an operator: ``main`` prints
    ``output`` first, then the one ``error:`` line, and exits 2.  What a status command
    raises when it finds a member attempt its group folder lost (group_orphans)."""

    def __init__(self, message: str, output: Any) -> None:
        super().__init__(message)
        self.output = output


#: The catalog options' words for a table TARGET and for a group's table members.
_CATALOG_WORDS = {
    False: ("table targets",
            "one catalog property as pyiceberg names it (repeatable), e.g. "
            "uri=sqlite:////data/cat.db, warehouse=file:///data/wh",
            "catalog properties from a JSON or YAML file (a mapping, or a .pyiceberg.yaml "
            "with a 'catalog:' section)"),
    True: ("table members",
           "one catalog property as pyiceberg names it (repeatable), for the Iceberg members "
           "(for Delta members only in a group without Iceberg members: delta-rs storage "
           "options)",
           "catalog properties from a JSON or YAML file (a mapping, or a .pyiceberg.yaml with "
           "a 'catalog:' section: each table member takes its own catalog's)"),
}


def add_store_options(p: argparse.ArgumentParser, *, group: bool,
                      ledger_uri: dict[str, Any]) -> None:
    """The options of every command that opens a store, for a TARGET or a group's members,
    spelled once: S3's, and the catalog's (``--catalog-property``, ``--catalog-config``,
    ``--ledger-uri``, whose ``add_argument`` keywords ``ledger_uri`` gives: a target's
    URI, a member's ``NAME=URI``)."""
    add_s3_options(p)
    what, property_help, config_help = _CATALOG_WORDS[group]
    cat = p.add_argument_group(f"{what} (pyiceberg catalog properties; values are never "
                               "printed)")
    cat.add_argument("--catalog-property", action="append", metavar="KEY=VALUE",
                     help=property_help)
    cat.add_argument("--catalog-config", metavar="FILE", help=config_help)
    cat.add_argument("--ledger-uri", **ledger_uri)
