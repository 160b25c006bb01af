"""A seeded workload of epochs (commit, abort, rerun, lost notification, crash, recover).

It drives a :class:`~airflow_tpc.Sink` whose S3 traffic goes through the fault
proxy, and checks it through an *observer* sink on a direct endpoint:

- every verb is retried on :class:`~airflow_tpc.TpcError` as an Airflow task
  retry would (a bounded number of times); any other exception escaping a verb
  is a bug (a client error that was not wrapped);
- after every verb call, failed or not, each epoch's read-committed content must
  be one that is allowed at that moment: the old content or the new one, never
  a mix, never gone once committed (:meth:`Workload.check_view`);
- once a verb returns, what it promised must be visible (a returned commit is
  published; a returned recover has rolled everything forward).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_tpc import Sink, TpcError, Transaction
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import PUBLISHED_MARKER

from ..core.helpers import write_staged

T = TypeVar("T")
Content = tuple[bytes, ...]
#: What a reader sees of one epoch: the sorted ETags (MD5s) of its published files.
Digests = tuple[str, ...]

#: Crash points hit while a commit promotes (after its decision): a crash there
#: leaves a decided commit for a later commit or recover to roll forward.
PROMOTION_CRASHES = ("commit.after_decision", "promote.before_copy", "promote.before_marker",
                     "promote.before_cleanup", "commit.before_published")


#: Verbs whose success can change what readers see (begin/write/pre-commit cannot;
#: after their *failures* the view is still checked).
VIEW_CHANGING = ("commit", "abort", "recover")


class NotConverged(AssertionError):
    """A verb kept failing past the retry budget an Airflow task would have."""


def digests(content: Content, multipart: bool = False) -> Digests:
    """The ETags S3 gives these files: the MD5 of the bytes, or for a one-part
    multipart object the MD5 of that part's MD5, suffixed ``-1``."""
    if multipart:
        return tuple(sorted(hashlib.md5(hashlib.md5(c).digest()).hexdigest() + "-1"
                            for c in content))
    return tuple(sorted(hashlib.md5(c).hexdigest() for c in content))


class ReadCommittedProbe:
    """The read-committed view of a target in one listing, straight from moto.

    Reading every published file after every verb would dominate the suite's
    time; one ``ListObjectsV2`` of the target plus the markers (cached by ETag)
    tells the same: which files each epoch's marker names, and whether each one
    exists with the expected content hash.  A named file that is missing shows
    as ``"MISSING:<key>"`` — a half-promoted or lost epoch.
    """

    def __init__(self, client: Any, sink: Sink) -> None:
        self.client = client
        self.bucket, _, self.root = sink.layout.root.partition("/")
        self._markers: dict[tuple[str, str], dict[str, Any]] = {}

    def _listed(self, marker: dict[str, Any]) -> list[str]:
        """The paths a marker gives: listed (version 1), or the entries of the manifest
        it names (version 2), read from moto here, which must be the published one."""
        if "files" in marker:
            return [f["path"] for f in marker["files"]]
        named = marker["manifest"]
        key = named.split("://", 1)[1].partition("/")[2] if "://" in named \
            else f"{self.root}/{named}"
        try:
            doc = json.loads(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except self.client.exceptions.NoSuchKey:
            return [f"{named} (MISSING)"]
        if doc.get("digest") != marker["manifest_digest"]:
            return [f"{named} (OTHER MANIFEST)"]
        base = named.rpartition("/")[0]
        return [f"{base}/{e['path']}" for e in doc["files"]]

    def view(self) -> dict[str, Digests]:
        etags: dict[str, str] = {}
        # The target's parent: "manifest" mode publishes files where they were staged,
        # beside the target (<parent>/_tpc_staging/<name>/, docs/PROTOCOL.md §2).
        parent = self.root.rpartition("/")[0]
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=parent + "/" if parent else "")
        for page in pages:
            for obj in page.get("Contents", []):
                etags[obj["Key"]] = obj["ETag"].strip('"')
        out: dict[str, Digests] = {}
        for key, etag in etags.items():
            if not key.startswith(self.root + "/"):
                continue
            rel = key[len(self.root) + 1:]
            first, _, rest = rel.partition("/")
            if rest != PUBLISHED_MARKER or not first.startswith("epoch="):
                continue
            doc = self._markers.get((key, etag))
            if doc is None:
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                doc = self._markers[(key, etag)] = json.loads(body)
            found = []
            for path in self._listed(doc):
                full = path.split("://", 1)[1].partition("/")[2] if "://" in path \
                    else f"{self.root}/{path}"
                found.append(etags.get(full, f"MISSING:{full}"))
            out[first[len("epoch="):]] = tuple(sorted(found))
        return out


@dataclass
class Workload:
    sink: Sink                  # through the fault proxy
    observer: Sink              # direct to moto: the test's eyes
    probe: ReadCommittedProbe   # direct to moto: the cheap per-verb check
    rng: random.Random
    max_verb_tries: int = 15
    #: Published files are multipart copies (their ETags are not content MD5s).
    multipart: bool = False
    #: epoch -> the content it must end with
    final: dict[str, Content] = field(default_factory=dict)
    #: epoch -> contents a reader may see right now (None: not published)
    allowed: dict[str, set[Digests | None]] = field(default_factory=dict)
    verb_failures: Counter = field(default_factory=Counter)
    verb_calls: Counter = field(default_factory=Counter)
    actions: Counter = field(default_factory=Counter)
    views_checked: int = 0
    _serial: int = 0

    # -- checking -------------------------------------------------------------
    def check_view(self) -> None:
        """Read-committed view is, per epoch, one allowed content: old or new, never half."""
        view = self.probe.view()
        self.views_checked += 1
        for epoch in set(view) | set(self.allowed):
            seen = view.get(epoch)
            ok = self.allowed.get(epoch, {None})
            assert seen in ok, f"epoch {epoch}: readers see {seen}, allowed only {ok}"

    def _settle(self, epochs: list[str] | None = None) -> None:
        """A verb returned: the named epochs (default all) show exactly their final content."""
        for epoch in (self.final if epochs is None else epochs):
            if epoch in self.final:
                self.allowed[epoch] = {digests(self.final[epoch], self.multipart)}

    # -- running a verb like an Airflow task with retries ---------------------
    def call(self, verb: str, fn: Callable[[], T]) -> T:
        for _ in range(self.max_verb_tries):
            self.verb_calls[verb] += 1
            try:
                result = fn()
            except TpcError as exc:  # StorageError etc.: the task fails, Airflow retries it
                self.verb_failures[(verb, type(exc).__name__)] += 1
                self.check_view()
                continue
            if verb in VIEW_CHANGING:
                self.check_view()
            return result
        raise NotConverged(f"{verb} failed {self.max_verb_tries} times in a row")

    # -- building blocks --------------------------------------------------------
    def _files(self, epoch: str) -> dict[str, bytes]:
        self._serial += 1
        n = self.rng.randint(1, 3)
        return {f"part-{i:03d}.parquet": (f"epoch {epoch} write {self._serial} part {i} "
                                          .encode() + self.rng.randbytes(self.rng.randint(0, 600)))
                for i in range(n)}

    def _stage(self, epoch: str, *, precommit: bool = True) -> tuple[Transaction, Content]:
        txn = self.call("begin", lambda: self.sink.begin(epoch))
        files = self._files(epoch)
        self.call("write", lambda: write_staged(self.sink, txn, files))
        if precommit:
            self.call("precommit", lambda: self.sink.precommit(txn))
        return txn, tuple(sorted(files.values()))

    def _commit(self, epoch: str, crash_at: str | None = None) -> None:
        txn, content = self._stage(epoch)
        self.allowed.setdefault(epoch, {None}).add(digests(content, self.multipart))
        if crash_at is None:
            self.call("commit", lambda: self.sink.commit(txn))
            self.final[epoch] = content
            self._settle()  # its own epoch and every earlier decided one (roll-forward)
            return
        try:
            with armed(crash_at):
                self.call("commit", lambda: self.sink.commit(txn))
        except InjectedCrash:
            # The process died after the decision (every crash point here is past it):
            # the commit is decided, its output must appear once someone rolls it forward.
            self.final[epoch] = content
            self.check_view()
            return
        # A retried commit found the decision already made and skipped the crash point.
        self.final[epoch] = content
        self._settle()

    # -- actions ------------------------------------------------------------------
    def step(self, epoch: str, earlier: list[str]) -> str:
        """One seeded action for ``epoch`` (or a rerun of an earlier epoch)."""
        r = self.rng.random()
        if r < 0.50 or not earlier:
            action = "commit"
            self._commit(epoch)
        elif r < 0.62:
            action = "abort"
            txn, _ = self._stage(epoch, precommit=self.rng.random() < 0.5)
            self.call("abort", lambda: self.sink.abort(txn, "test abort"))
        elif r < 0.74:
            action = "rerun"
            self._commit(self.rng.choice(earlier))
        elif r < 0.86:
            action = "crash"
            self._commit(epoch, crash_at=self.rng.choice(PROMOTION_CRASHES))
        elif r < 0.93:
            action = "abandon"  # a writer that died before pre-commit (or right after)
            self._stage(epoch, precommit=self.rng.random() < 0.5)
        else:
            action = "recover"
            self.call("recover", lambda: self.sink.recover())
            self._settle()
        self.actions[action] += 1
        return action

    def run(self, epochs: int) -> None:
        names = [f"2026-01-{i + 1:02d}" if i < 28 else f"e{i:04d}" for i in range(epochs)]
        for i, epoch in enumerate(names):
            self.step(epoch, names[:i])

    def finish(self) -> None:
        """The pipeline restarts: roll forward what is decided, abort what is not."""
        self.call("recover", lambda: self.sink.recover(abort_undecided=True))
        self._settle()

