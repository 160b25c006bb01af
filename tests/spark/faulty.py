"""Test-only variants of the tpc data source that crash or fail at chosen points.

They live in an importable module (not in a test function) because Spark
unpickles the writer in separate Python workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time

from airflow_tpc.errors import TpcError
from airflow_tpc.spark.datasource import TpcDataSource, TpcWriter

# How long a test-only writer waits for a signal from another task: minutes, so a
# busy machine gives a slow pass rather than a failure.
FLAG_DEADLINE_S = 300


class CrashFirstAttemptWriter(TpcWriter):
    """Kills its Python worker (no cleanup runs) right after attempt 0 of partition 0
    closed its first file; records what the crashed attempt left behind."""

    def file_closed(self, relpath: str, partition_id: int, attempt: int) -> None:
        if partition_id == 0 and attempt == 0:
            fs, root = self._fs()
            left = sorted(p[len(root):].lstrip("/") for p in fs.find(root)
                          if f"-a0-w{self.write_id}-" in p and "part-00000-" in p)
            record = self.options_record
            with open(record, "w") as fh:
                json.dump({"write_id": self.write_id, "left": left}, fh)
            os._exit(137)


class CrashFirstAttemptSource(TpcDataSource):
    writer_class = CrashFirstAttemptWriter

    @classmethod
    def name(cls) -> str:
        return "tpc_crash_first_attempt"

    def writer(self, schema, overwrite):
        w = super().writer(schema, overwrite)
        w.options_record = dict(self.options)["record"]
        return w


class AlwaysFailWriter(TpcWriter):
    """Partition 1 fails on every attempt, after writing a file: the job fails.

    It first waits until partition 0's task has written its file and returned its
    commit message, so that abort() has a successful task's output to remove (else
    the two tasks race).  The order is explicit: partition 0 creates a flag file
    once its ``write`` has returned; partition 1 polls for that flag, with a
    deadline generous enough for a busy machine, no sleep standing in for it.
    """

    def _done_flag(self) -> str:
        # Both Python workers of a local-mode job share this machine's temp dir;
        # write_id is the same in every copy of the (pickled) writer.
        return os.path.join(tempfile.gettempdir(), f"tpc-always-fail-{self.write_id}.p0-done")

    def write(self, iterator):
        message = super().write(iterator)
        if message.partition_id == 0:
            with open(self._done_flag(), "w"):
                pass
        return message

    def file_closed(self, relpath: str, partition_id: int, attempt: int) -> None:
        if partition_id == 1:
            flag = self._done_flag()
            deadline = time.monotonic() + FLAG_DEADLINE_S
            while not os.path.exists(flag):
                if time.monotonic() > deadline:
                    raise TpcError(f"test set-up: partition 0 did not finish within "
                                   f"{FLAG_DEADLINE_S} s")
                time.sleep(0.05)  # polling the flag, not ordering by time
            raise TpcError(f"injected failure in partition 1 attempt {attempt}")

    def abort(self, messages) -> None:
        try:
            super().abort(messages)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self._done_flag())


class AlwaysFailSource(TpcDataSource):
    writer_class = AlwaysFailWriter

    @classmethod
    def name(cls) -> str:
        return "tpc_always_fail"
