"""A wrong --namespace is refused with one clear line; ids always come from the ledger."""

from __future__ import annotations

import json

from airflow_tpc import Sink, SinkConfig
from airflow_tpc.cli import main

from .helpers import full_tree, stage


def _target(tmp_path) -> Sink:
    sink = Sink(str(tmp_path / "t"), "right")
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    sink.commit(txn)
    stage(sink, "2", {"b.parquet": b"B"})
    return sink


def test_a_wrong_namespace_is_refused_for_every_command_and_changes_nothing(tmp_path, capsys):
    sink = _target(tmp_path)
    before = full_tree(sink)
    for argv in (["list"], ["status"], ["abort", "--epoch", "2"], ["recover"], ["gc"]):
        assert main([*argv[:1], sink.target, *argv[1:], "--namespace", "wrong"]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:"), err
        assert "'right'" in err[0] and "'wrong'" in err[0] and "Traceback" not in err[0]
    assert full_tree(sink) == before


def test_ids_are_the_ledgers_even_when_acting_as_another_namespace(tmp_path, capsys):
    sink = _target(tmp_path)
    assert main(["list", sink.target, "--json"]) == 0
    assert {t["txn_id"] for t in json.loads(capsys.readouterr().out)} == {"right/1/1",
                                                                          "right/2/1"}
    foreign = Sink(sink.target, "wrong", config=SinkConfig(allow_foreign_namespace=True))
    assert {i.txn_id for i in foreign.describe()} == {"right/1/1", "right/2/1"}
