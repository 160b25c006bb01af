"""A target never sits inside, around, or named like another target's machinery; begin
checks links before it lists or hands out staging; promotion never deletes a folder
holding another target's claim and names the files a user put into an epoch by hand.

Every refusal is one clear PlacementError (or StorageError for a link) and changes
nothing, byte for byte, on both targets (their trees, staging beside them included).
Locally and on S3 through moto's server.
"""

from __future__ import annotations

import logging
import os

import pytest

from airflow_tpc import PlacementError, Sink, StorageError, TpcError, TxnState

from .helpers import full_tree, local_tree, stage


def _sink(store, rel: str, namespace: str = "p") -> Sink:
    base, options = store
    return Sink(f"{base.rstrip('/')}/{rel}", namespace, storage_options=options)


def _everything(store) -> dict:
    """Every file under the store's test folder: both targets, their staging, all."""
    base, options = store
    probe = Sink(f"{base.rstrip('/')}/probe-not-created", "probe", storage_options=options)
    root = probe._root.rpartition("/")[0]
    if probe.storage.scheme == "file":
        return local_tree(root) if os.path.isdir(root) else {}
    return {i.path: probe.storage.read_bytes(i.path) for i in probe.storage.list(root)}


@pytest.mark.parametrize("rel", [
    "outer/epoch=2026-01-01",         # inside an epoch folder (of outer, or anyone's)
    "outer/epoch=2026-01-01/inner",
    "_tpc_staging",                   # named like the staging root beside targets
    "_tpc_staging/outer",             # inside it
    "outer/_tpc",                     # a ledger
    "outer/_tpc/inner",
])
def test_machinery_names_are_refused_and_change_nothing(store, rel):
    outer = _sink(store, "outer")
    txn, _ = stage(outer, "2026-01-01", {"a.parquet": b"outer"})
    before = _everything(store)
    bad = _sink(store, rel, "q")
    with pytest.raises(PlacementError, match="refused: its path has a folder named"):
        bad.begin("2026-01-01")
    assert _everything(store) == before
    outer.commit(txn)  # the first target is unaffected
    assert outer.describe("2026-01-01")[0].state is TxnState.COMMITTED


def test_a_target_inside_another_is_refused_both_ways(store):
    outer = _sink(store, "outer")
    stage(outer, "2026-01-01", {"a.parquet": b"outer"})
    before = _everything(store)
    with pytest.raises(PlacementError, match="lies inside target .*outer"):
        _sink(store, "outer/sub/inner", "q").begin("2026-01-01")
    assert _everything(store) == before

    inner = _sink(store, "lake/inner", "q")   # now the other order: inner first
    stage(inner, "2026-01-01", {"b.parquet": b"inner"})
    before = _everything(store)
    with pytest.raises(PlacementError, match="contains target .*lake/inner"):
        _sink(store, "lake", "r").begin("2026-01-01")
    assert _everything(store) == before


def test_promotion_never_deletes_a_nested_target(store, caplog):
    """A target left inside an epoch folder by an older version (placed by hand here):
    the commit's promotion is refused before it changes any file (the decision stands:
    the commit is rolled forward once the nested target is moved out).  Files put there
    by hand are named in a WARNING when the epoch replaces them."""
    outer = _sink(store, "outer")
    txn, _ = stage(outer, "e1", {"a.parquet": b"outer"})
    storage = outer.storage
    nested = storage.join(outer._root, "epoch=e1", "old")
    storage.put(storage.join(nested, "_tpc", "sink.json"),
                b'{"format": "airflow-tpc-sink", "version": 2, "namespace": "old"}')
    storage.put(storage.join(nested, "data.parquet"), b"old data")
    ledger = outer.storage.join(outer._root, "_tpc") + "/"

    def files() -> dict:  # everything but the ledger, which records the decision
        return {k: v for k, v in full_tree(outer).items() if not k.startswith(ledger)}

    before = files()
    with pytest.raises(PlacementError, match="holds another target"):
        outer.commit(txn)
    assert files() == before
    assert not outer.committed_files()
    with pytest.raises(TpcError, match="holds another target"):  # and so does recover
        outer.recover()
    assert files() == before

    storage.delete_prefix(nested)
    storage.put(storage.join(outer._root, "epoch=e1", "by-hand.parquet"), b"hand")
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        assert outer.recover().rolled_forward == [("e1", 1)]
    assert "by-hand.parquet" in caplog.text and "not published by airflow-tpc" in caplog.text
    assert outer.describe("e1")[0].state is TxnState.COMMITTED


def test_begin_refuses_a_linked_staging_root_before_listing(tmp_path):
    """<parent>/_tpc_staging as a link to a folder elsewhere: begin refuses before it
    claims, lists or hands out a staging path; nothing is written on either side."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "t" / "epoch=e1" / "attempt=000007").mkdir(parents=True)
    (tmp_path / "lake").mkdir()
    os.symlink(elsewhere, tmp_path / "lake" / "_tpc_staging")
    before = local_tree(str(tmp_path))
    sink = Sink(str(tmp_path / "lake" / "t"), "p")
    with pytest.raises(StorageError, match="is a symbolic link"):
        sink.begin("e1")
    assert local_tree(str(tmp_path)) == before
    assert not (tmp_path / "lake" / "t").exists()


def test_begin_refuses_a_linked_epoch_staging_folder_of_a_claimed_target(tmp_path):
    sink = Sink(str(tmp_path / "lake" / "t"), "p")
    stage(sink, "e0", {"a.parquet": b"a"})
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "attempt=000009").mkdir(parents=True)
    epoch_dir = os.path.join(sink.layout.staging_root, "epoch=e1")
    os.symlink(elsewhere, epoch_dir)
    before = local_tree(str(tmp_path))
    with pytest.raises(StorageError, match="is a symbolic link"):
        sink.begin("e1")
    assert local_tree(str(tmp_path)) == before
