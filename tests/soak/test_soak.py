"""The soak at CI size, and proof that its checker can fail.

``test_soak_ci_size`` plays a seeded history of 9 epochs (a share on S3 through
moto's server) with every fault kind, then runs the checker: no violation may be
found.  The full size runs on demand: ``scripts/soak.py --epochs 60 --seed N --s3``
(results in docs/soak.md).

A checker that never fails proves nothing, so ``test_checker_finds`` then damages
that soak's targets (local and S3) one way at a time — the ways exactly-once can be
lost — and requires the checker to name the damage and the epoch.  Each damage is
undone before the next, and the targets must pass again at the end.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from airflow_tpc.core.promote import read_marker
from tests.soak.soak import KINDS, RACES, Soak, check, is_hidden

SEED = 183     # 9 epochs: every kind (also on S3), 4 concurrent races (one of each kind)
EPOCHS = 9


@pytest.fixture(autouse=True)
def _no_ambient_transaction(monkeypatch, spark):
    monkeypatch.delenv("AIRFLOW_TPC_TXN", raising=False)
    spark.conf.unset("spark.airflow_tpc.txn")


@pytest.fixture(scope="module")
def soak_run(spark, moto_endpoint, tmp_path_factory):
    """One CI-size soak per test session; the checker tests then damage its targets."""
    import boto3

    options = {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing-secret-key",
               "region_name": "us-east-1"}
    bucket = f"tpc-soak-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id=options["key"],
                 aws_secret_access_key=options["secret"],
                 region_name="us-east-1").create_bucket(Bucket=bucket)
    soak = Soak(spark, tmp_path_factory.mktemp("soak"), epochs=EPOCHS, seed=SEED,
                s3_target=f"s3://{bucket}/soak/events", s3_options=options, s3_share=0.3)
    try:
        return soak, soak.run(), options
    finally:
        soak.close()    # the shared session's settings back, also if the run raised


def test_soak_ci_size(soak_run, capsys):
    _, result, _ = soak_run
    print(f"soak seed={SEED} epochs={EPOCHS} ({result.elapsed_s:.0f} s)")
    print(result.counts.render())
    for a in result.anomalies:
        print(f"ANOMALY: {a}")
    for v in result.violations:
        print(f"VIOLATION: {v}")
    out = capsys.readouterr().out
    with capsys.disabled():     # the counts belong in the CI log, also under -q
        print("\n" + out)

    assert result.violations == []
    counts = result.counts
    assert "violations        0" in out and "faults injected" in out
    assert counts.epochs == EPOCHS
    assert {k: counts.faults[k] for k in KINDS if counts.faults[k] == 0} == {}
    assert {label.split("@")[0] for label in counts.races} == set(RACES)
    assert counts.reruns > 0 and counts.refusals > 0 and counts.crash_points
    assert {m.target for m in result.model.values()} == {"local", "s3"}
    assert counts.in_flight == 3
    assert counts.epochs_committed == sum(m.committed is not None
                                          for m in result.model.values()) > EPOCHS // 2


# ------------------------------------------------------------- the checker can fail
NEVER = "2027-01-01"


@dataclass
class History:
    """One target of the soak, as the checker sees it, with epochs to damage."""

    soak: Soak
    kind: str
    s3_options: dict | None
    committed: list[str]       # committed epochs of this target
    pending: tuple[str, int]   # a pre-committed, undecided attempt of a committed epoch
    aborted: tuple[str, int]   # an aborted attempt (its staging gone)

    @property
    def sink(self):
        return self.soak.sink(self.kind)

    def check(self) -> list[str]:
        return check(self.soak.spark, {self.kind: self.sink}, self.soak.model, self.soak.seed,
                     self.s3_options)

    def published(self, epoch: str) -> list[str]:
        """Store paths of the files the epoch's marker lists."""
        sink = self.sink
        marker = read_marker(sink.layout, epoch)
        return [sink.storage.join(sink.layout.root, f["path"]) for f in marker["files"]]

    def staged(self, epoch: str, attempt: int) -> list[str]:
        sink = self.sink
        prefix = sink.layout.staging(epoch, attempt).rstrip("/") + "/"
        return [o.path for o in sink.storage.list(prefix)
                if not is_hidden(o.path[len(prefix):])]


@pytest.fixture(scope="module", params=["local", "s3"])
def history(request, soak_run):
    soak, result, options = soak_run
    kind = request.param
    infos = soak.sink(kind).describe()
    committed = sorted(e for e, m in result.model.items()
                       if m.target == kind and m.committed is not None)
    pending = [(i.epoch, i.attempt) for i in infos
               if i.state.value == "PRECOMMITTED" and i.epoch in committed]
    aborted = [(i.epoch, i.attempt) for i in infos if i.state.value == "ABORTED"]
    assert len(committed) >= 2 and pending and aborted, (committed, pending, aborted)
    return History(soak, kind, options if kind == "s3" else None, committed, pending[0],
                   aborted[0])


@dataclass
class Damage:
    """One way to break the target; ``expect`` is how the checker must name it."""

    name: str
    apply: Callable[[History], tuple[str, Callable[[], None]]]   # -> (epoch damaged, undo)
    expect: list[tuple[str, ...]]   # per entry, one of its phrases must be in a violation
                                    # that names the damaged epoch


def _put_copy(h: History, src: str, dst: str) -> Callable[[], None]:
    st = h.sink.storage
    st.put(dst, st.read_bytes(src))
    return lambda: st.delete_files([dst])


def duplicate_published(h: History) -> tuple[str, Callable[[], None]]:
    epoch = h.committed[0]
    src = h.published(epoch)[0]
    head, base = posixpath.split(src)
    return epoch, _put_copy(h, src, f"{head}/copy-{base}")


def delete_published(h: History) -> tuple[str, Callable[[], None]]:
    st, epoch = h.sink.storage, h.committed[0]
    src = h.published(epoch)[0]
    data = st.read_bytes(src)
    st.delete_files([src])
    return epoch, lambda: st.put(src, data)


def overwrite_published(h: History) -> tuple[str, Callable[[], None]]:
    """A published file replaced by another epoch's file under the same name."""
    st, epoch = h.sink.storage, h.committed[0]
    dst = h.published(epoch)[0]
    data = st.read_bytes(dst)
    st.put(dst, st.read_bytes(h.published(h.committed[-1])[0]))
    return epoch, lambda: st.put(dst, data)


def staged_into_published(h: History) -> tuple[str, Callable[[], None]]:
    """The pending (pre-committed, undecided) rerun's files copied into its epoch."""
    st, (epoch, attempt) = h.sink.storage, h.pending
    folder = h.sink.layout.published_dir(epoch)
    undo = [_put_copy(h, src, st.join(folder, posixpath.basename(src)))
            for src in h.staged(epoch, attempt)]
    assert undo
    return epoch, lambda: [u() for u in undo]


def staging_of_aborted(h: History) -> tuple[str, Callable[[], None]]:
    """Files left in the staging of an aborted attempt."""
    lay, (epoch, attempt) = h.sink.layout, h.aborted
    _put_copy(h, h.published(h.committed[0])[0],
              h.sink.storage.join(lay.staging(epoch, attempt), "part-late.parquet"))
    return epoch, lambda: lay.remove_staging(epoch, attempt)


def staging_without_ledger(h: History) -> tuple[str, Callable[[], None]]:
    lay, epoch = h.sink.layout, h.committed[0]
    _put_copy(h, h.published(epoch)[0], h.sink.storage.join(lay.staging(epoch, 999),
                                                             "part-0.parquet"))
    return epoch, lambda: lay.remove_staging(epoch, 999)


def uncommitted_epoch_visible(h: History) -> tuple[str, Callable[[], None]]:
    """A plain epoch=... folder nobody committed (e.g. a non-transactional writer)."""
    st, lay = h.sink.storage, h.sink.layout
    folder = lay.published_dir(NEVER)
    _put_copy(h, h.published(h.committed[0])[0], st.join(folder, "part-00000.parquet"))
    return NEVER, lambda: st.delete_prefix(folder)


def marker_deleted(h: History) -> tuple[str, Callable[[], None]]:
    """A committed epoch made invisible to read-committed readers."""
    st, lay, epoch = h.sink.storage, h.sink.layout, h.committed[-1]
    data = st.read_bytes(lay.marker(epoch))
    st.delete_files([lay.marker(epoch)])
    return epoch, lambda: st.put(lay.marker(epoch), data)


DAMAGES = [
    Damage("duplicate a published file", duplicate_published, [("stray file",)]),
    Damage("delete a published file", delete_published, [("missing 1 file",)]),
    # locally Hadoop's .crc sidecar makes Spark refuse the changed file outright
    Damage("overwrite a published file with other data", overwrite_published,
           [("size differs",), ("differs from its last committed attempt",
                                "read_committed failed")]),
    Damage("copy a staged attempt's files into the published epoch", staged_into_published,
           [("stray file",)]),
    Damage("leave staging of an aborted attempt", staging_of_aborted,
           [("left by finished",), ("ABORTED",)]),
    Damage("staging without a ledger record", staging_without_ledger,
           [("has staging but no ledger record",)]),
    Damage("make an uncommitted epoch visible", uncommitted_epoch_visible,
           [("no published marker",)]),
    Damage("delete a committed epoch's marker", marker_deleted,
           [("committed epoch",), ("is missing",)]),
]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.name for d in DAMAGES])
def test_checker_finds(history, damage):
    epoch, undo = damage.apply(history)
    try:
        found = history.check()
    finally:
        undo()
    named = [v for v in found if epoch in v]
    assert named, f"{damage.name}: not found; the checker said {found}"
    for phrases in damage.expect:
        assert any(p in v for v in named for p in phrases), \
            f"{damage.name}: no violation says {' or '.join(map(repr, phrases))}: {found}"
    if history.kind == "local" and damage.name in ("duplicate a published file",
                                                    "copy a staged attempt's files into "
                                                    "the published epoch"):
        # what a plain Spark reader of the local target would get: extra rows
        assert any("local plain read" in v and "unexpected row" in v for v in named), found
    if damage.name == "make an uncommitted epoch visible" and history.kind == "local":
        assert any("visible but never committed" in v for v in named), found


def test_checker_clean_again(history):
    """Every damage was undone: the same target passes again (the checks are specific)."""
    assert history.check() == []
