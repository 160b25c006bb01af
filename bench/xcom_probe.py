"""The XCom pointer the PrecommitSensor pushes, measured in a process of its own.

``bench_core.py`` starts this once (``python bench/xcom_probe.py``) and keeps it
for the whole run: Airflow is imported here, never in the benchmark's own
process, whose timings and heap must not carry Airflow's import (hundreds of MB
of objects make every garbage collection of a timed commit slower).

Protocol, one JSON object a line:

- request on stdin: ``{"target": ..., "namespace": ..., "txn": <the submit task's
  XCom: Transaction.to_dict() + storage_conn_id + storage_options>}``;
- reply on stdout, on a line starting with ``XCOM-PROBE ``: ``{"pointer": {...},
  "json_bytes": len(json.dumps(pointer)), "seconds": <time of the call>}`` or
  ``{"error": "..."}``.

The pointer comes from the real code path: ``PrecommitSensor._pointer``, which
re-loads the transaction from the ledger, reads and validates the sealed manifest
and reduces it to the pointer the sensor returns (its XCom ``return_value``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time

MARK = "XCOM-PROBE "


def reply(doc: dict) -> None:
    sys.stdout.write(MARK + json.dumps(doc) + "\n")
    sys.stdout.flush()


def main() -> int:
    # A throw-away AIRFLOW_HOME: importing Airflow must not create ~/airflow.
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="tpc-bench-airflow-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    try:
        from airflow_tpc import SinkConfig
        from airflow_tpc.airflow.sensors import PrecommitSensor
    except Exception as exc:  # Airflow not installed: every answer says so
        error = f"cannot import the Airflow provider: {type(exc).__name__}: {exc}"
        for _ in sys.stdin:
            reply({"error": error})
        return 0
    for name in ("airflow_tpc", "airflow.task", "airflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            sensor = PrecommitSensor(task_id="wait_precommit", target=req["target"],
                                     namespace=req["namespace"], submit_task_id="submit",
                                     sink_config=SinkConfig(verify="size"))
            start = time.perf_counter()
            pointer = sensor._pointer(sensor.tpc_hook.check_precommit(req["txn"]))
            seconds = time.perf_counter() - start
            reply({"pointer": pointer, "json_bytes": len(json.dumps(pointer)),
                   "seconds": seconds})
        except Exception as exc:
            reply({"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
