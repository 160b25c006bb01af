"""What THIS build reads back from a target: rows through the read-committed reader's
own code (the markers, then each committed file), states, and the CLI."""

from __future__ import annotations

import json
from typing import Any

from airflow_tpc import Sink
from airflow_tpc.cli import main


def committed_rows(sink: Sink) -> dict[str, list[str]]:
    """epoch -> the ``tag`` of every committed row: the files the published markers
    name (``Sink.committed_files``, what ``read_committed`` reads), each read whole.
    Each tag names the attempt that wrote the row (``E@A``), and every file holds two
    rows: an epoch seen twice, or at two attempts, shows here."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: dict[str, list[str]] = {}
    for epoch, uris in sink.committed_files().items():
        for uri in uris:
            path = uri.split("://", 1)[1] if uri.startswith("s3://") else uri[len("file://"):]
            table = pq.read_table(pa.BufferReader(sink.storage.read_bytes(path)))
            out.setdefault(epoch, []).extend(table["tag"].to_pylist())
    return {e: sorted(tags) for e, tags in out.items()}


def once(**epochs: int) -> dict[str, list[str]]:
    """The rows of each epoch written once, by the given attempt: ``once(e1=1)``."""
    return {e: [f"{e}@{a}"] * 2 for e, a in epochs.items()}


def states(sink: Sink) -> dict[str, str]:
    """``"epoch/attempt"`` -> state, as this build judges the ledger."""
    return {f"{i.epoch}/{i.attempt}": i.state.value for i in sink.describe()}


def cli_json(capsys: Any, *argv: str) -> Any:
    """This build's CLI, in process: its JSON answer (exit 0 asserted)."""
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)
