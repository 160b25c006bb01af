"""Where a target may lie: never inside, or named like, another target's machinery.

A target owns more than its data: its ledger and claim (``<target>/_tpc/``), its epoch
folders (``<target>/epoch=E/``, replaced whole by a commit) and its staging root (by
default ``<parent>/_tpc_staging/<name>``).  A second target placed in any of those is
destroyed or exposed by the first: nested at ``<P>/epoch=e1`` it is deleted when P
commits e1; named ``_tpc_staging`` beside other targets it holds their uncommitted
staging, which its readers then read and its commits may delete.  So a target is
refused, with one clear error and before anything is written, when

* a folder of its path is named like the machinery (``_tpc``, ``_tpc_staging``,
  ``epoch=…``): it would lie in some target's ledger, staging root or epoch folder;
* a folder above it holds another target's claim (``_tpc/sink.json``): it would lie
  inside that target's tree;
* a folder below it holds another target's claim: it would contain that target;
* it, a folder above or a folder below holds a group's claim (``_tpc/group.json``): a
  group's ledger is laid out as a target's, so the two would damage each other
  (:mod:`airflow_tpc.group.claim` refuses a group folder placed so, the other way).

The name rule is checked on every ``begin`` (no I/O); the claims above and below when
the target is first claimed (one read per folder above, one listing below).  Promotion
has its own guard (:func:`airflow_tpc.core.promote.check_displaced`): it never deletes a
folder that holds a claim.
"""

from __future__ import annotations

from ..errors import PlacementError
from ..storage import Storage
from ..storage.base import STAGING_HOME_DIR
from .layout import TPC_DIR, claim_path

#: Folder names that belong to the machinery of some target.
MACHINERY_NAMES = (TPC_DIR, STAGING_HOME_DIR)
EPOCH_PREFIX = "epoch="
CLAIM_SUFFIX = f"/{TPC_DIR}/sink.json"
#: A group's claim: its folder holds a ledger laid out as a target's.
GROUP_CLAIM = "group.json"
GROUP_SUFFIX = f"/{TPC_DIR}/{GROUP_CLAIM}"


def machinery_name(name: str) -> bool:
    """True for a folder name some target's ledger, staging or epoch folder uses."""
    return name in MACHINERY_NAMES or name.startswith(EPOCH_PREFIX)


def name_problem(storage: Storage, root: str) -> str | None:
    """Why the target's path is named like machinery (None: it is not).  The store says
    which parts of the path are folders (a bucket name is not)."""
    for name in storage.folder_names(root):
        if machinery_name(name):
            what = ("an epoch folder" if name.startswith(EPOCH_PREFIX)
                    else "a staging root" if name == STAGING_HOME_DIR else "a ledger")
            return (f"its path has a folder named {name!r}, the name of {what} of airflow-tpc: "
                    "the target would lie in another target's machinery, or be taken for it")
    return None


def check_name(storage: Storage, root: str) -> None:
    """Refuse a target path named like machinery (no I/O)."""
    problem = name_problem(storage, root)
    if problem:
        raise PlacementError(f"target {storage.uri(root)} refused: {problem}. Nothing was "
                             "written; choose a path without such folders.")


def group_claim_path(storage: Storage, root: str) -> str:
    """A group's claim (``G/_tpc/group.json``): its folder holds a ledger as a target's."""
    return storage.join(root, TPC_DIR, GROUP_CLAIM)


def claims_around(storage: Storage, root: str) -> tuple[list[tuple[str, str]],
                                                        list[tuple[str, str]]]:
    """(claimed folders above ``root``, claimed folders at or below it), each with its
    kind, ``"target"`` (``_tpc/sink.json``) or ``"group"`` (``_tpc/group.json``): what
    it would lie inside, and what it would be or contain.  Two reads per folder above,
    one listing below."""
    parts = root.strip("/").split("/")
    lead = "/" if root.startswith("/") else ""
    folders = [lead + "/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
    above = [(path, kind) for path in folders
             for kind, claim in (("target", claim_path), ("group", group_claim_path))
             if storage.exists(claim(storage, path))]
    below = sorted({(info.path[: -len(suffix)], kind) for info in storage.list(root)
                    for kind, suffix in (("target", CLAIM_SUFFIX), ("group", GROUP_SUFFIX))
                    if info.path.endswith(suffix)})
    return above, below


def check_claims_around(storage: Storage, root: str) -> None:
    """Refuse a new target that lies inside, contains, or is a claimed target or a
    group's folder (a group's ledger is laid out as a target's: the two would mix)."""
    above, below = claims_around(storage, root)
    below = [(path, kind) for path, kind in below if (path, kind) != (root, "target")]
    if above:
        path, kind = above[0]
        if kind == "group":
            raise PlacementError(
                f"target {storage.uri(root)} refused: it lies inside the folder of group "
                f"{storage.uri(path)} (its claim: {storage.uri(group_claim_path(storage, path))})"
                ". Nothing was written; put the target apart from every group folder.")
        raise PlacementError(
            f"target {storage.uri(root)} refused: it lies inside target "
            f"{storage.uri(path)} (its claim: "
            f"{storage.uri(claim_path(storage, path))}); "
            "that target's commits replace its epoch folders and its readers would read this "
            "one's files. Nothing was written; put the target beside it, not inside.")
    groups = [path for path, kind in below if kind == "group"]
    if root in groups:
        raise PlacementError(
            f"target {storage.uri(root)} refused: it is the folder of group "
            f"{storage.uri(root)} (its claim: {storage.uri(group_claim_path(storage, root))});"
            " the target's ledger and the group's would be one and damage each other. "
            "Nothing was written; choose a folder that is no group's.")
    if groups:
        raise PlacementError(
            f"target {storage.uri(root)} refused: it contains the folder of group "
            f"{storage.uri(groups[0])}. Nothing was written; choose a folder that holds no "
            "group's folder.")
    if below:
        raise PlacementError(
            f"target {storage.uri(root)} refused: it contains target {storage.uri(below[0][0])}"
            + (f" and {len(below) - 1} more" if len(below) > 1 else "")
            + "; its commits could replace or delete that target's files. Nothing was "
            "written; choose a folder that holds no other target.")
