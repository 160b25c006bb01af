"""How a Spark job finds the group transaction it writes for: :func:`current_group`.

A group (:class:`airflow_tpc.group.Group`) writes one epoch of several targets as one
transaction.  The submit operator begins it and hands the job one payload::

    {"group": <the group's folder>, "namespace": ..., "epoch": ..., "attempt": N,
     "members": {<name>: <that member's single-target payload (build_payload)>}}

in the Spark conf key ``spark.airflow_tpc.group`` (or ``$AIRFLOW_TPC_GROUP``).  Each
member is an ordinary :class:`~airflow_tpc.spark.context.JobTransaction`: its own
table, storage endpoint and credentials file, and no secrets (the same checks).  The
job writes each member's ``output_uri(name)`` and seals them all with
:meth:`JobGroup.precommit`; only the group (Airflow's commit task) decides.

Imports only the standard library and the pure core, like ``context``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ..core.group_records import MEMBER_RE
from ..core.layout import AttemptId, check_attempt, check_epoch
from ..core.manifest import Manifest
from ..core.records import BEGIN, Begin
from ..errors import TpcError
from .context import JobTransaction, NoTransactionError
from .payload import check_uri_field, payload_object, read_payload

log = logging.getLogger("airflow_tpc.spark")

#: Spark conf key carrying the group payload (``--conf`` of spark-submit).
GROUP_CONF_KEY = "spark.airflow_tpc.group"
#: Environment variable carrying the group payload when the conf key is absent.
GROUP_ENV_VAR = "AIRFLOW_TPC_GROUP"


def _check_member_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not MEMBER_RE.fullmatch(name):
        raise TpcError(f"{where}: invalid member name {name!r}: letters, digits, '_' and "
                       "'-', starting with a letter or digit, at most 64")
    return name


def _check_members_agree(namespace: str, epoch: str, attempt: int,
                         members: dict[str, JobTransaction], where: str) -> None:
    """Every member is the group's epoch and attempt, in the group's namespace."""
    wrong = [f"{n!r} is {m.namespace}/{m.epoch}/{m.attempt}" for n, m in sorted(members.items())
             if (m.namespace, m.epoch, m.attempt) != (namespace, epoch, attempt)]
    if wrong:
        raise TpcError(f"{where}: every member must be transaction {namespace}/{epoch}/"
                       f"{attempt} of the group (namespace/epoch/attempt), but member "
                       f"{'; member '.join(wrong)}. Build the payload from one Group.begin.")


def _parse_members(members: Any, where: str) -> dict[str, JobTransaction]:
    if not isinstance(members, dict) or not members:
        raise TpcError(f"{where}: 'members' must be a non-empty object {{name: payload}}")
    return {_check_member_name(name, where):
            JobTransaction.from_payload(doc, where=f"{where} member {name!r}")
            for name, doc in sorted(members.items())}


def build_group_payload(group_uri: str, namespace: str, epoch: str, attempt: int,
                        members: dict[str, str]) -> str:
    """The JSON the submit operator puts in ``spark.airflow_tpc.group``.

    ``members``: name -> that member's payload as :func:`build_payload` returns it.
    Each is parsed and checked as the job would (a payload with secrets is refused),
    and must be the group's namespace, epoch and attempt.
    """
    where = "group payload"
    group_uri = check_uri_field(group_uri, where, "group")
    epoch, attempt = check_epoch(epoch), check_attempt(attempt)
    if not isinstance(namespace, str) or not namespace:
        raise TpcError(f"{where}: 'namespace' must be a non-empty string")
    jobs = _parse_members(members, where)
    _check_members_agree(namespace, epoch, attempt, jobs, where)
    return json.dumps({"group": group_uri, "namespace": namespace, "epoch": epoch,
                       "attempt": attempt,
                       "members": {n: json.loads(j.to_json()) for n, j in jobs.items()}},
                      sort_keys=True)


def _named(name: str, exc: BaseException) -> BaseException:
    """``exc`` again, of its own class when it takes a message, naming the member."""
    msg = f"group member {name!r}: {exc}"
    try:
        new = type(exc)(msg)
        new.__dict__.update(exc.__dict__)  # e.g. StorageError.denied
        return new
    except Exception:  # noqa: BLE001 - a class with another constructor
        return TpcError(msg)


@dataclass
class JobGroup(AttemptId):
    """The job's view of one group attempt: a :class:`JobTransaction` per member.

    A plain, picklable dataclass (rebuilt from :meth:`to_json` anywhere).  It seals
    members; committing or aborting is the group's (Airflow's commit task), never
    the job's: a member's own commit or abort is refused by the core.
    """

    group: str
    namespace: str
    epoch: str
    attempt: int
    members: dict[str, JobTransaction] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return sorted(self.members)

    def member(self, name: str) -> JobTransaction:
        try:
            return self.members[name]
        except (KeyError, TypeError):
            raise TpcError(f"group {self.group} has no member {name!r} (members: "
                           f"{', '.join(self.names)})") from None

    def output_uri(self, name: str) -> str:
        """Where the job writes member ``name`` (its staging, spelled for Spark)."""
        return self.member(name).output_uri

    def with_epoch_column(self, name: str, df: Any) -> Any:
        """``df`` as member ``name`` needs it (the ``epoch`` column for a table)."""
        return self.member(name).with_epoch_column(df)

    def precommit(self) -> dict[str, Manifest | None]:
        """Seal every member (idempotent).  The first member that fails raises its own
        error naming it; members sealed before it stay sealed (sealing decides nothing)."""
        out: dict[str, Manifest | None] = {}
        for name in self.names:
            try:
                out[name] = self.members[name].precommit()
            except Exception as exc:
                raise _named(name, exc) from exc
        log.info("sealed group %s of %s: %s", self.txn_id, self.group, ", ".join(
            f"{n} {m.total_files} files" if m is not None else f"{n} (nothing to seal)"
            for n, m in out.items()))
        return out

    def check_live(self) -> None:
        """Fail fast if any member's attempt can no longer be sealed (a zombie: a new
        group attempt began), or is not this group's member of that name."""
        for name in self.names:
            job = self.members[name]
            try:
                job.check_live()
                begin = job.sink().ledger.read(self.epoch, self.attempt, BEGIN)
                own = begin.group if isinstance(begin, Begin) else None
                if not own or str(own.get("uri", "")).rstrip("/") != self.group.rstrip("/") \
                        or own.get("member") != name:
                    raise TpcError(f"{job.txn_id} on {job.target} was not begun as member "
                                   f"{name!r} of group {self.group} (stale or edited payload)")
            except Exception as exc:
                raise _named(name, exc) from exc

    # -- (de)serialisation ---------------------------------------------------
    def to_json(self) -> str:
        return build_group_payload(self.group, self.namespace, self.epoch, self.attempt,
                                   {n: m.to_json() for n, m in self.members.items()})

    @classmethod
    def from_payload(cls, payload: str | dict[str, Any], *, where: str = "group payload"
                     ) -> JobGroup:
        """Parse and check a group payload; refuse one that carries credentials."""
        doc = payload_object(payload, where)
        missing = [k for k in ("group", "namespace", "epoch", "attempt", "members")
                   if k not in doc]
        if missing:
            raise TpcError(f"{where} is not a group transaction: missing {missing}")
        group = check_uri_field(doc["group"], where, "group")
        namespace = doc["namespace"]
        if not isinstance(namespace, str) or not namespace:
            raise TpcError(f"{where}: 'namespace' must be a non-empty string")
        epoch, attempt = check_epoch(doc["epoch"]), check_attempt(doc["attempt"])
        members = _parse_members(doc["members"], where)
        _check_members_agree(namespace, epoch, attempt, members, where)
        return cls(group, namespace, epoch, attempt, members)


def read_group_payload(spark: Any = None) -> tuple[str | None, str]:
    """(payload, where it came from): the Spark conf key first, then the environment."""
    return read_payload(spark, GROUP_CONF_KEY, GROUP_ENV_VAR)


def current_group(spark: Any = None, *, check: bool = True) -> JobGroup:
    """The group transaction this job writes for (``spark.airflow_tpc.group`` or
    ``$AIRFLOW_TPC_GROUP``).  ``check`` (default) reads every member's ledger first,
    so a zombie job fails before computing its output."""
    payload, where = read_group_payload(spark)
    if not payload:
        raise NoTransactionError(
            f"no airflow-tpc group transaction: neither the Spark conf {GROUP_CONF_KEY} nor "
            f"the environment variable {GROUP_ENV_VAR} is set. Run this job through the "
            "airflow-tpc group submit, or pass build_group_payload(...) in one of them (a "
            "job writing a single target uses current_transaction(spark) instead).")
    job = JobGroup.from_payload(payload, where=where)
    if check:
        job.check_live()
    log.info("writing for group %s of %s from %s; members %s", job.txn_id, job.group, where,
             ", ".join(f"{n} -> {job.output_uri(n)}" for n in job.names))
    return job
