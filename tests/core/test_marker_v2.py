"""The published marker names its manifest (version 2) where the manifest travels with
the files: a few hundred bytes whatever the file count, and readers take the files from
the manifest once its digest is the marker's.  Version-1 markers (earlier builds, S3
copies, tables) are still read."""

from __future__ import annotations

import json

import pytest

from airflow_tpc import LedgerError, Sink, SinkConfig
from airflow_tpc.core.manifest import MANIFEST_NAME
from airflow_tpc.core.marker import marker_doc, read_marker
from airflow_tpc.core.marker import rel_to_root as _rel_to_root

from .helpers import committed_contents, full_tree, stage


def _marker(sink: Sink, epoch: str) -> dict:
    return json.loads(sink.storage.read_bytes(sink.layout.marker(epoch)))


@pytest.mark.parametrize("promotion", ["move", "manifest"])
def test_marker_names_the_manifest_and_stays_small(tmp_path, promotion):
    sink = Sink(str(tmp_path / "t"), "ns", config=SinkConfig(promotion=promotion))
    sizes = {}
    for epoch, count in (("1", 2), ("2", 400)):
        txn, manifest = stage(sink, epoch, {f"d={i % 3}/p-{i}.parquet": b"x" * i
                                            for i in range(count)})
        sink.commit(txn)
        doc = _marker(sink, epoch)
        sizes[epoch] = len(sink.storage.read_bytes(sink.layout.marker(epoch)))
        assert doc["version"] == 2 and "files" not in doc
        assert doc["manifest_digest"] == manifest.digest
        folder = sink.layout.published_dir(epoch) if promotion == "move" \
            else sink.layout.staging(epoch, txn.attempt)
        assert doc["manifest"] == _rel_to_root(sink.layout, sink.storage.join(folder,
                                                                            MANIFEST_NAME))
        expected = {_rel_to_root(sink.layout, sink.storage.join(folder, f.path))
                    for f in manifest.files}
        assert {f["path"] for f in read_marker(sink.layout, epoch)["files"]} == expected
    assert sizes["2"] - sizes["1"] < 16  # flat in the file count (digits of the totals)
    assert len(committed_contents(sink)["2"]) == 400


def _published(tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn, manifest = stage(sink, "1", {"a.parquet": b"A", "b/c.parquet": b"C"})
    sink.commit(txn)
    return sink, txn, manifest


@pytest.mark.parametrize("named", ["epoch=2/_tpc_manifest.json", "../x/_tpc_manifest.json",
                                   "epoch=1/b/_tpc_manifest.json", "/etc/_tpc_manifest.json"])
def test_a_marker_naming_a_manifest_elsewhere_is_refused(tmp_path, named):
    sink, _, _ = _published(tmp_path)
    doc = {**_marker(sink, "1"), "manifest": named}
    sink.storage.put(sink.layout.marker("1"), json.dumps(doc).encode())
    before = full_tree(sink)
    with pytest.raises(LedgerError, match="copied or edited by hand"):
        sink.committed_files()
    assert full_tree(sink) == before


def test_a_manifest_replaced_under_its_marker_is_refused(tmp_path):
    """The manifest beside the files is another attempt's (or damaged): its digest is
    not the marker's, so readers refuse rather than read the wrong files."""
    sink, _, _ = _published(tmp_path)
    other = Sink(str(tmp_path / "u"), "ns")
    txn, _ = stage(other, "1", {"z.parquet": b"Z"})
    path = sink.storage.join(sink.layout.published_dir("1"), MANIFEST_NAME)
    sink.storage.put(path, other.storage.read_bytes(other.storage.join(
        other.layout.staging("1", txn.attempt), MANIFEST_NAME)))
    with pytest.raises(LedgerError, match="the manifest it names.*is of digest"):
        sink.committed_files()
    sink.storage.delete_files([path])
    with pytest.raises(LedgerError, match="is missing"):
        sink.committed_files()


def test_a_reader_straddling_a_switch_reads_the_marker_again(tmp_path, monkeypatch):
    """The marker and its manifest are two reads; an epoch switched between them (the
    manifest is then the next attempt's) is read again, whole, from the new marker."""
    sink, _, _ = _published(tmp_path)
    old_manifest = sink.storage.read_bytes(
        sink.storage.join(sink.layout.published_dir("1"), MANIFEST_NAME))
    txn2, _ = stage(sink, "1", {"new.parquet": b"N"})
    old_marker = sink.storage.read_bytes(sink.layout.marker("1"))
    sink.commit(txn2)
    reads = []
    real = type(sink.storage).read_bytes

    def first_read_sees_the_old_marker(self, path):
        reads.append(path)
        if path == sink.layout.marker("1") and len(reads) == 1:
            return old_marker  # read just before the switch; the manifest read after it
        return real(self, path)

    monkeypatch.setattr(type(sink.storage), "read_bytes", first_read_sees_the_old_marker)
    assert old_manifest != real(sink.storage, sink.storage.join(
        sink.layout.published_dir("1"), MANIFEST_NAME))
    assert [f["path"] for f in read_marker(sink.layout, "1")["files"]] == \
        ["epoch=1/new.parquet"]
    assert reads.count(sink.layout.marker("1")) == 2


def test_a_version_1_marker_of_an_earlier_build_is_read(tmp_path):
    sink, txn, manifest = _published(tmp_path)
    v1 = marker_doc(manifest, "move", [f"epoch=1/{f.path}" for f in manifest.files])
    assert v1["version"] == 1
    sink.storage.put(sink.layout.marker("1"), json.dumps(v1).encode())
    assert sorted(committed_contents(sink)["1"]) == [b"A", b"C"]
    # ... and a rerun of the epoch replaces it with version 2, its old files known
    txn2, _ = stage(sink, "1", {"a.parquet": b"A2"})
    sink.commit(txn2)
    assert _marker(sink, "1")["version"] == 2
    assert committed_contents(sink)["1"] == [b"A2"]


@pytest.mark.parametrize("promotion", ["move", "manifest"])
@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_rerun_repairs_an_epoch_whose_published_manifest_is_lost(tmp_path, promotion,
                                                                  damage):
    """Readers refuse an epoch whose named manifest is lost or damaged; committing the
    epoch again is the repair, so the commit must not need that manifest (it only
    named the files put there by hand in a warning)."""
    sink = Sink(str(tmp_path / "t"), "ns", config=SinkConfig(promotion=promotion))
    txn, _ = stage(sink, "1", {"a.parquet": b"A", "b/c.parquet": b"C"})
    sink.commit(txn)
    folder = sink.layout.published_dir("1") if promotion == "move" \
        else sink.layout.staging("1", txn.attempt)
    path = sink.storage.join(folder, MANIFEST_NAME)
    if damage == "deleted":
        sink.storage.delete_files([path])
    else:
        sink.storage.put(path, sink.storage.read_bytes(path)[:50])
    with pytest.raises(LedgerError, match="missing|damaged"):
        sink.committed_files()
    txn2, _ = stage(sink, "1", {"a.parquet": b"A2"})
    assert sink.commit(txn2).outcome == "committed"
    assert committed_contents(sink) == {"1": [b"A2"]}
    assert sink.recover() is not None
    assert committed_contents(sink) == {"1": [b"A2"]}
