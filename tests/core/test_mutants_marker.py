"""The published marker a manifest-mode commit swaps in (``marker.swap_marker``) says
what it is, on a local disk too.

Mutation testing (docs/mutation.md) found that writing the marker's ``mode`` as null
survived every selected test: locally only a manifest-mode commit goes through the
compare-and-swap (a "move" commit exchanges folders), and no selected test read the
mode back.  Readers and the next promotion use it: ``check_displaced`` trusts a marker
of mode "manifest" to have put nothing into the epoch folder.  Real local files.
"""

from __future__ import annotations

import json

from airflow_tpc import Sink, SinkConfig

from .helpers import read_committed, stage
from .test_json_schema import validator


def _marker(sink: Sink, epoch: str) -> dict:
    raw = sink.storage.read_bytes(sink.layout.marker(epoch))
    assert raw is not None
    doc: dict = json.loads(raw)
    return doc


def test_a_manifest_mode_commit_swaps_in_a_marker_that_names_its_mode(tmp_path):
    sink = Sink(str(tmp_path / "t"), "marks", config=SinkConfig(promotion="manifest"))
    first, _ = stage(sink, "0", {"p.parquet": b"one"})
    sink.commit(first)
    second, _ = stage(sink, "0", {"p.parquet": b"two"})
    sink.commit(second)  # over an existing marker: the swap path, not the first put

    doc = _marker(sink, "0")
    assert doc["mode"] == "manifest"
    assert doc["attempt"] == second.attempt
    assert not list(validator("published-marker").iter_errors(doc))
    assert read_committed(sink) == {"0": {"p.parquet": b"two"}}
