"""Test-only variants of the tpc data source that crash or fail at chosen points.

They live in an importable module (not in a test function) because Spark
unpickles the writer in separate Python workers.
"""

from __future__ import annotations

import json
import os
import time

from airflow_tpc.errors import TpcError
from airflow_tpc.spark.datasource import TpcDataSource, TpcWriter


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

    It first waits until partition 0 has finished its file, so that abort() has a
    successful task's output to remove (else the two tasks race).
    """

    def file_closed(self, relpath: str, partition_id: int, attempt: int) -> None:
        if partition_id == 1:
            fs, root = self._fs()
            deadline = time.time() + 20
            while time.time() < deadline and not any(
                    "part-00000-" in p for p in fs.find(root)):
                time.sleep(0.1)
            time.sleep(1.0)  # partition 0 closes its file and reports its message
            raise TpcError(f"injected failure in partition 1 attempt {attempt}")


class AlwaysFailSource(TpcDataSource):
    writer_class = AlwaysFailWriter

    @classmethod
    def name(cls) -> str:
        return "tpc_always_fail"
