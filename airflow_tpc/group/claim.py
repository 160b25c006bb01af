"""A group's claim (``G/_tpc/group.json``) and where a group may lie: the checks every
group verb makes before it writes anything, shared by the API
(:class:`~airflow_tpc.group.Group`) and the CLI (``airflow-tpc group``).

A group's namespace and members never change (a new set of targets is a new group),
so every verb that writes (begin, precommit, commit, abort, recover) first checks that
the :class:`~airflow_tpc.group.Group` in hand names exactly the members and targets its
``group.json`` records.  Without it, a recover given a subset of the members, or
another target under a member's name, would write decision copies and pending entries
into targets that are not the group's.

Where: a group's folder holds a ledger laid out as a target's (``G/_tpc/ledger``), so
it is refused, as a nested target is (:mod:`airflow_tpc.core.placement`), when it is a
target's folder, lies inside one or contains one; and a target is refused at a group's
folder, inside or around one (:func:`airflow_tpc.core.placement.check_claims_around`).  Two
members that are one folder under two spellings (a symbolic link) are refused when the
Group is built.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.group_records import GROUP_FORMAT
from ..core.layout import TPC_DIR
from ..core.ledger import Ledger
from ..core.placement import GROUP_CLAIM, claims_around, group_claim_path, name_problem
from ..errors import LedgerError, NamespaceConflict, PlacementError, TpcError
from ..storage import Storage

__all__ = ["GROUP_CLAIM", "check_group_folder", "check_member_names", "check_members",
           "check_namespace", "check_same_folders", "describe_members", "read_group_claim",
           "real_path"]


def describe_members(members: Mapping[str, str]) -> str:
    return ", ".join(f"{n} ({t})" for n, t in sorted(members.items())) or "none"


def read_group_claim(storage: Storage, root: str) -> dict[str, Any] | None:
    """The group's claim, checked for its shape (one read); None when there is none."""
    path = group_claim_path(storage, root)
    claim = Ledger.decode_at(storage, path, storage.read_bytes(path))
    if claim is None:
        return None
    if claim.get("format") != GROUP_FORMAT or not isinstance(claim.get("namespace"), str) \
            or not isinstance(claim.get("members"), dict) or not claim["members"]:
        raise LedgerError(f"{storage.uri(path)} is not a group claim (format "
                          f"{claim.get('format')!r}); it was edited or damaged. Nothing was "
                          "changed.")
    claim["members"] = {str(n): str(t).rstrip("/") for n, t in claim["members"].items()}
    return claim


def check_namespace(uri: str, claim: Mapping[str, Any], namespace: str,
                    advice: str = "a group's namespace never changes") -> None:
    if claim["namespace"] != namespace:
        raise NamespaceConflict(f"group {uri} belongs to namespace {claim['namespace']!r}, "
                                f"not {namespace!r}: {advice}")


def check_member_names(uri: str, claimed: Mapping[str, str], names: Iterable[str], *,
                       given_as: str = "this Group names") -> None:
    """Refuse a member set that is not the claimed one, naming the difference."""
    names = set(names)
    missing, extra = sorted(set(claimed) - names), sorted(names - set(claimed))
    if not missing and not extra:
        return
    diff = "; ".join(part for part in (
        f"missing {', '.join(missing)}" if missing else "",
        f"not members: {', '.join(extra)}" if extra else "") if part)
    raise TpcError(f"group {uri} was created with members {describe_members(claimed)}; "
                   f"{given_as} {', '.join(sorted(names))} ({diff}): give each of its "
                   "members, and only those (a group's members never change; a new set of "
                   "targets is a new group). Nothing was changed.")


def check_members(uri: str, claimed: Mapping[str, str], given: Mapping[str, str], *,
                  given_as: str = "this Group names",
                  spelled: Mapping[str, str] | None = None) -> None:
    """Refuse members whose names or targets differ from the claim (``spelled``: how
    each member was given, named in the error, e.g. a CLI option)."""
    check_member_names(uri, claimed, given, given_as=given_as)
    for name in sorted(given):
        if given[name].rstrip("/") != claimed[name]:
            how = f" ({spelled[name]})" if spelled and name in spelled else ""
            raise TpcError(f"member {name!r} of group {uri} is {claimed[name]}, not "
                           f"{given[name]}{how}: a group's members never change. Nothing was "
                           "changed.")


def real_path(storage: Storage, root: str) -> str:
    """Where a store path really is: local symbolic links resolved (object stores have
    none: the path itself)."""
    return os.path.realpath(root) if storage.scheme == "file" else root.rstrip("/")


def check_same_folders(targets: Mapping[str, tuple[Storage, str, str]]) -> None:
    """Refuse two members that are one folder under two spellings (a symbolic link): the
    second's begin would find the first's record and the group would never commit.
    ``targets``: member -> (its store, its store path, its URI as given)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for name, (storage, root, uri) in sorted(targets.items()):
        key = (storage.scheme, real_path(storage, root))
        if key in seen:
            other, other_uri = seen[key]
            raise TpcError(f"members {other!r} ({other_uri}) and {name!r} ({uri}) of the group "
                           f"are one target ({storage.uri(key[1])}) under two spellings; give "
                           "each target once. Nothing was written.")
        seen[key] = (name, uri)


def check_group_folder(storage: Storage, root: str) -> None:
    """Refuse a new group folder that is a target's folder, lies inside one or holds one
    (before ``group.json`` is written): the target's ledger and the group's would be
    one, or one's commits would replace the other's files.  One read per folder above,
    one listing below."""
    where = storage.uri(root)
    problem = name_problem(storage, root)
    if problem:
        raise PlacementError(f"group folder {where} refused: {problem}. Nothing was "
                             "written; choose a folder of the group's own.")
    above, below = claims_around(storage, root)
    targets_above = [path for path, kind in above if kind == "target"]
    if targets_above:
        raise PlacementError(
            f"group folder {where} refused: it lies inside target "
            f"{storage.uri(targets_above[0])}, whose commits replace its folders and whose "
            "readers would read the group's records. Nothing was written; give the group a "
            "folder apart from every target.")
    at = [path for path, kind in below if kind == "target" and path == root]
    if at or storage.exists(storage.join(root, TPC_DIR, "sink.json")):
        raise PlacementError(
            f"group folder {where} refused: it is the folder of target {where} (its claim "
            f"{storage.uri(storage.join(root, TPC_DIR, 'sink.json'))}); the group's ledger "
            "and the target's would be one and damage each other. Nothing was written; "
            "give the group a folder apart from every target.")
    inside = [path for path, kind in below if kind == "target"]
    if inside:
        raise PlacementError(
            f"group folder {where} refused: it contains target {storage.uri(inside[0])}"
            + (f" and {len(inside) - 1} more" if len(inside) > 1 else "")
            + ". Nothing was written; give the group a folder apart from every target.")
