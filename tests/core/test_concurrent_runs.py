"""Two races the soak's concurrent runs found in the core, kept as regression tests.

Neither lost exactly-once (the soak's checker stayed clean), but both made a
commit report the wrong thing: a commit overtaken after its decision said
"committed" (and marked itself published), and a winner's commit raised because
a fenced job was still writing into the staging it removed.  Real local storage,
no Spark; a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from airflow_tpc import Sink
from airflow_tpc.core.faults import armed


def _stage(txn, name: str, data: bytes = b"x") -> None:
    path = os.path.join(txn.staging_uri.removeprefix("file://"), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def test_commit_overtaken_after_its_decision_reports_superseded(tmp_path):
    """Soak race ``held@commit.after_decision``: attempt 1 decides, pauses; attempt 2
    begins, commits and is published; attempt 1's commit then returns "committed"
    (the commit operator would announce it with an Asset event) and writes
    ``published.json`` for an attempt that readers never saw."""
    target = str(tmp_path / "t")
    low = Sink(target, "ns").begin("e1")
    _stage(low, "part-0.parquet", b"low")
    digest = Sink(target, "ns").precommit(low).digest
    reached, release, holder, result = threading.Event(), threading.Event(), [], {}

    def gate(_name: str) -> None:
        if threading.current_thread() is holder[0]:
            reached.set()
            release.wait(30)

    def run_low() -> None:
        holder.append(threading.current_thread())
        result["low"] = Sink(target, "ns").commit(low, expected_digest=digest)

    with armed("commit.after_decision", gate):
        thread = threading.Thread(target=run_low)
        thread.start()
        assert reached.wait(30)
        high = Sink(target, "ns").begin("e1")
        _stage(high, "part-0.parquet", b"high")
        m2 = Sink(target, "ns").precommit(high)
        assert Sink(target, "ns").commit(high, expected_digest=m2.digest).outcome == "committed"
        release.set()
        thread.join(30)
    assert Sink(target, "ns").committed_files()["e1"][0].endswith("part-0.parquet")
    ledger = os.listdir(tmp_path / "t/_tpc/ledger/epoch=e1/attempt=000001")
    assert (result["low"].outcome, "published.json" in ledger) == ("superseded", False)


def test_commit_survives_a_fenced_job_still_writing(tmp_path):
    """Soak race ``parallel_jobs``: the higher attempt's commit aborts the lower one
    and removes its staging while the lower job still writes there (Spark's task
    committers create ``_temporary/…`` folders and files).  The commit is decided
    and published, yet the call raises; the commit task fails (and its abort task
    is refused: the attempt is COMMITTED).  Locally this hits most tries."""
    target = str(tmp_path / "t")
    failures = []
    for i in range(20):
        if failures:
            break
        epoch = f"e{i}"
        low = Sink(target, "ns").begin(epoch)
        high = Sink(target, "ns").begin(epoch)
        _stage(high, "part-0.parquet")
        digest = Sink(target, "ns").precommit(high).digest
        stop = threading.Event()

        def zombie(low=low, stop=stop) -> None:
            n = 0
            while not stop.is_set():
                # (an OSError: its folder was just removed; a real job fails there)
                with contextlib.suppress(OSError):
                    _stage(low, f"_temporary/0/task_{n}/part-{n}.parquet")
                n += 1
                time.sleep(0.0002)

        thread = threading.Thread(target=zombie)
        thread.start()
        try:
            Sink(target, "ns").commit(high, expected_digest=digest)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{epoch}: {type(exc).__name__}: {exc}")
        finally:
            stop.set()
            thread.join(30)
    assert failures == []
    # The zombies are gone now: whatever they left in staging, recover removes.
    Sink(target, "ns").recover()
    assert not os.path.exists(tmp_path / "t/_tpc/staging") or not any(
        (tmp_path / "t/_tpc/staging").rglob("*.parquet"))
