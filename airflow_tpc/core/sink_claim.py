"""The claim and layout of a sink's target: the base every part of :class:`~airflow_tpc.Sink`
stands on.

A target is bound to one namespace by its claim (``_tpc/sink.json``), written once
by the first begin; the same claim records where the target stages, so the layout
(ledger, staging, seals) is known from one read.  Every verb that changes the target
checks the claim first.  Nothing here decides or finishes a transaction.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from ..errors import LedgerError, NamespaceConflict, TpcError
from ..storage import Storage, open_storage
from .ledger import TPC_DIR, Layout, Ledger, claim_path, legacy_staging_root, staging_root_problem
from .placement import check_claims_around
from .transaction import SinkConfig

log = logging.getLogger("airflow_tpc")

_NAMESPACE_MAX = 200


class SinkClaim:
    """One target as a namespace holds it: its store and root, its layout and ledger
    (read from the claim on first use), and the claim that binds every writing verb."""

    def __init__(self, target: str, namespace: str, *,
                 storage_options: dict[str, Any] | None = None,
                 config: SinkConfig | None = None,
                 storage: Storage | None = None) -> None:
        if not isinstance(namespace, str) or not namespace.strip() \
                or len(namespace) > _NAMESPACE_MAX or any(c in namespace for c in "/\\\n\x00") \
                or not _is_utf8(namespace):
            raise TpcError(f"invalid namespace {namespace!r}: a non-empty UTF-8 name without "
                           "'/', '\\', a newline or NUL")
        self.config = config or SinkConfig()
        if storage is None:
            storage, root = open_storage(target, storage_options,
                                         copy_workers=self.config.copy_workers)
        else:  # an injected store (fault-injection tests): only the path comes from the URI
            root = open_storage(target)[1]
        self.storage: Storage = storage
        self.namespace = namespace
        self._root = root
        #: A staging root set in the config (table sinks set theirs): "" when none.
        self._configured_staging = ""
        if self.config.staging_root:
            other, self._configured_staging = open_storage(self.config.staging_root)
            if other.scheme != self.storage.scheme:
                raise TpcError("staging_root must be on the same store as the target")
            problem = staging_root_problem(root, self._configured_staging)
            if problem:
                raise TpcError(f"staging_root {self.config.staging_root} cannot hold the "
                               f"staging of {self.storage.uri(root)}: {problem}")
        self.storage.check_target(root)
        self.target = self.storage.uri(root)
        self._claimed = False
        # The layout is known without a request when the config names the staging root;
        # otherwise it is the one the target's claim records, read on first use.
        self._layout: Layout | None = None
        self._ledger: Ledger | None = None

    # ----------------------------------------------------------------- layout
    @property
    def layout(self) -> Layout:
        """Where the target's ledger, staging and published files lie.  Staging is where
        the target's claim says (``_tpc/sink.json``, ``staging_root``), read on first use:
        a target keeps the layout it was created with."""
        if self._layout is None:
            self._adopt(self._load_claim())
        assert self._layout is not None
        return self._layout

    @layout.setter
    def layout(self, value: Layout) -> None:
        self._layout = value
        self._ledger = None

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.layout)
        return self._ledger

    @ledger.setter
    def ledger(self, value: Ledger) -> None:
        self._ledger = value

    def _claimed_staging_root(self, claim: dict[str, Any] | None) -> str:
        """The staging root a claim records: its ``staging_root``; a claim without one
        was written before staging moved beside the target, or by a sink configured
        with its own staging root: ``<target>/_tpc/staging`` unless configured.
        An unclaimed target has no staging yet: the place a claim would get (by name,
        without probing the store)."""
        if claim is None:
            return self.storage.staging_home(self._root) \
                or legacy_staging_root(self.storage, self._root)
        value = claim.get("staging_root")
        if value is None:
            return legacy_staging_root(self.storage, self._root)
        where = self.storage.uri(self.layout_claim_path)
        try:
            if not isinstance(value, str) or not value:
                raise TpcError("not a URI")
            other, path = open_storage(value)
        except TpcError:
            raise LedgerError(f"{where} names staging_root {value!r}, which is not a URI of "
                              "this store; it was edited by hand or damaged") from None
        problem = staging_root_problem(self._root, path) if other.scheme == \
            self.storage.scheme else "it is on another store"
        if problem:
            raise LedgerError(f"{where} names staging_root {value!r}: {problem}; it was "
                              "edited by hand or damaged. Nothing was changed.")
        return path

    @property
    def layout_claim_path(self) -> str:
        return claim_path(self.storage, self._root)

    def _adopt(self, claim: dict[str, Any] | None) -> None:
        """Take the layout the claim records (a configured staging root must agree with
        it: two places would hide attempts from each other).  A claim naming a
        ``table_location`` is a table's ledger kept apart from the table, whose
        location takes data files only: its seals lie under ``_tpc/sealed``."""
        recorded = self._claimed_staging_root(claim)
        seal_root = self.storage.join(self._root, TPC_DIR, "sealed") \
            if claim is not None and claim.get("table_location") else ""
        if self._configured_staging:
            if claim is not None and claim.get("staging_root") is not None \
                    and recorded.rstrip("/") != self._configured_staging.rstrip("/"):
                raise TpcError(
                    f"target {self.target} stages in {self.storage.uri(recorded)} (recorded "
                    f"in its claim {self.storage.uri(self.layout_claim_path)}), but this sink "
                    f"is configured with staging_root {self.config.staging_root}; a target "
                    "keeps the staging root it was created with")
            recorded = self._configured_staging
        if self._layout is None:
            self.layout = Layout(self.storage, self._root, recorded, seal_root)
        elif (self._layout.staging_root, self._layout.seal_root) != (recorded, seal_root):
            self.layout = replace(self._layout, staging_root=recorded, seal_root=seal_root)

    def _claim_fields(self) -> dict[str, Any]:
        """More fields of a new claim (a table sink's ledger apart names its table)."""
        return {}

    def _load_claim(self) -> dict[str, Any] | None:
        """The namespace claim, checked (one read); None if the target is unclaimed."""
        path = self.layout_claim_path
        doc = Ledger.decode_at(self.storage, path, self.storage.read_versioned(path)[0])
        if doc is None:
            return None
        owner = doc.get("namespace")
        if doc.get("format") != "airflow-tpc-sink" or not isinstance(owner, str) or not owner:
            raise LedgerError(f"{self.storage.uri(path)} is not a namespace claim (format "
                              f"{doc.get('format')!r}, namespace {owner!r}); it was edited by "
                              "hand or damaged. Restore it as {\"format\": \"airflow-tpc-sink\","
                              " \"version\": 1, \"namespace\": \"<owner>\"}.")
        return doc

    # ------------------------------------------------------------------ claim
    def claimed_namespace(self) -> str | None:
        """The namespace the target is claimed by (``_tpc/sink.json``); None if unclaimed."""
        claim = self._load_claim()
        return claim["namespace"] if claim is not None else None

    def _check_claim(self, verb: str) -> None:
        """The namespace claim binds every verb that changes the target, not only begin.
        The same read settles the layout (the claim records where staging lies)."""
        claim = self._load_claim()
        self._adopt(claim)
        owner = claim["namespace"] if claim is not None else None
        if owner is None or owner == self.namespace:
            return
        if not self.config.allow_foreign_namespace:
            raise NamespaceConflict(
                f"{verb} refused: target {self.target} is owned by namespace {owner!r}, not "
                f"{self.namespace!r}; pass allow_foreign_namespace=True (CLI: "
                "--allow-foreign-namespace) if you mean to act on another pipeline's target.")
        log.warning("%s of target %s (namespace %r) by namespace %r (allow_foreign_namespace)",
                    verb, self.target, owner, self.namespace)

    def _new_staging_root(self) -> str:
        """Where a target claimed now without a configured staging root stages: beside
        the target when the store has a place there that serves (asked of the store),
        else inside it, with a WARNING (recursive readers then see staging)."""
        home = self.storage.staging_home(self._root)
        problem = "it has no parent folder (a bucket or filesystem root)" if home is None \
            else self.storage.staging_home_problem(self._root, home)
        if problem is None:
            return home  # type: ignore[return-value]
        legacy = legacy_staging_root(self.storage, self._root)
        log.warning("target %s stages inside itself (%s): staging cannot lie beside it, since "
                    "%s. Recursive readers of the target that do not skip '_' folders (DuckDB "
                    "'**/*.parquet') then see staged files; read it with read_committed, or "
                    "set SinkConfig.staging_root on the same store", self.target,
                    self.storage.uri(legacy), problem)
        return legacy

    def _claim_namespace(self) -> None:
        if self._claimed:
            return
        path = self.layout_claim_path
        claim = self._load_claim()
        if claim is None:
            # A new target: not inside, around or through another target's machinery,
            # checked before the claim (or the staging probe) writes anything.
            check_claims_around(self.storage, self._root)
            by_name = Layout(self.storage, self._root, self._claimed_staging_root(None))
            self.storage.check_real_dirs(by_name.staging_base, by_name.staging_root,
                                         links_only=True)
            doc: dict[str, Any] = {"format": "airflow-tpc-sink", "version": 2,
                                   "namespace": self.namespace, **self._claim_fields()}
            if not self._configured_staging:
                # Only a root airflow-tpc chose is recorded: a configured one (table
                # targets) stays the sink's to name, so a sink opened without that
                # configuration (a plain folder sink on a table's location) looks in
                # <target>/_tpc/staging and fails closed, as before.
                doc["staging_root"] = self.storage.uri(self._new_staging_root())
            if self.storage.put_if_absent(path, Ledger.encode(doc)):
                claim = doc
            else:  # claimed meanwhile (or our own retried request took effect)
                claim = self._load_claim()
                if claim is None:
                    raise LedgerError(f"{self.storage.uri(path)} vanished after a "
                                      "conflicting write")
        self._adopt(claim)
        owner = claim["namespace"]
        if owner != self.namespace:
            if not self.config.allow_foreign_namespace:
                raise NamespaceConflict(
                    f"target {self.target} is written by namespace {owner!r}; this sink's "
                    f"namespace is {self.namespace!r}. Two pipelines must not share a target "
                    "unknowingly; pass allow_foreign_namespace=True if this is intended.")
            log.warning("namespace %r writes target %s owned by namespace %r "
                        "(allow_foreign_namespace=True)", self.namespace, self.target, owner)
        self._claimed = True


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no record or path can hold it
        return False
    return True
