"""The Azure backend itself, on Azurite: the conditions it relies on, the copy guard,
parallel copies, bad targets and options refused with one clear error, no secret in
any message, the CLI on an ``az://`` target, and readers (pyarrow, DuckDB) of what a
commit published.  ``gs://`` is refused with the reason (docs/PROTOCOL.md, stores)."""

from __future__ import annotations

import hashlib
import io
import json
import threading

import pytest

from airflow_tpc import Sink, StorageError, TpcError, UnsupportedStorage
from airflow_tpc.cli import main
from airflow_tpc.core.faults import armed
from airflow_tpc.storage import AzureStorage, open_storage, storage_class

from .helpers import assert_invariant, committed_contents, stage
from .test_checks_exist import assert_same, full_snapshot


@pytest.fixture()
def target(azurite):
    return f"{azurite.new_prefix()}/t", azurite.options()


def test_decision_is_one_conditional_create_among_racers(target):
    """16 racers put the same blob with If-None-Match: * — exactly one creates it, and
    the blob holds that one's bytes."""
    storage, root = open_storage(*target)
    path = storage.join(root, "decision.json")
    barrier, won = threading.Barrier(16), []

    def race(i: int) -> None:
        racer, _ = open_storage(*target)
        barrier.wait()
        if racer.put_if_absent(path, f"racer {i}".encode()):
            won.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert storage.read_bytes(path) == f"racer {won[0]}".encode()


def test_compare_and_swap_refuses_a_stale_version(target):
    storage, root = open_storage(*target)
    path = storage.join(root, "marker.json")
    assert storage.put_if_version(path, b"v1", None)
    assert not storage.put_if_version(path, b"again", None)
    data, version = storage.read_versioned(path)
    assert data == b"v1" and version
    assert storage.put_if_version(path, b"v2", version)
    assert not storage.put_if_version(path, b"v3 from a stale reader", version)
    assert storage.read_bytes(path) == b"v2"
    assert storage.read_versioned(storage.join(root, "none")) == (None, None)


def test_rewrite_between_verification_and_copy_is_never_published(target):
    """Staging verified, then a same-size rewrite before the server-side copy: Azure's
    copy guard (x-ms-source-if-match) refuses it; nothing is published, and since an
    Azure ETag is a version, not the bytes' hash, even restored bytes stay refused."""
    sink = Sink(target[0], "hard", storage_options=target[1])
    old, _ = stage(sink, "1", {"a.parquet": b"old!"})
    sink.commit(old)
    txn, manifest = stage(sink, "1", {"a.parquet": b"good"})
    assert all(f.checksum.startswith("etag:") for f in manifest.files)
    staged = sink.storage.join(sink.layout.staging("1", txn.attempt), "a.parquet")

    def rewrite(_name):
        sink.storage.put(staged, b"EVIL")

    with armed("promote.before_copy", rewrite), \
            pytest.raises(StorageError, match="changed after it was verified"):
        sink.commit(txn, expected_digest=manifest.digest)
    assert committed_contents(sink) == {"1": [b"old!"]}
    sink.storage.put(staged, b"good")
    with pytest.raises(TpcError, match="changed after the commit was decided"):
        sink.recover()
    assert committed_contents(sink) == {"1": [b"old!"]}


def test_writer_md5_checksums_are_sealed_as_etags(target):
    """The tpc data source hands pre-commit MD5s (S3's ETag); Azure's ETag is no MD5, so
    the listing's ETags are sealed instead, and the commit verifies and copies by them."""
    sink = Sink(target[0], "md5", storage_options=target[1])
    txn = sink.begin("1")
    files = {"a.parquet": b"A" * 100, "p=1/b.parquet": b"B" * 50}
    for rel, data in files.items():
        sink.storage.put(sink.storage.join(sink.layout.staging("1", txn.attempt), rel), data)
    md5s = {rel: "md5:" + hashlib.md5(data).hexdigest() for rel, data in files.items()}
    manifest = sink.precommit(txn, checksums=md5s)
    assert all(f.checksum.startswith("etag:0x") for f in manifest.files)
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    assert_invariant(sink, {"1": sorted(files.values())}, open_staging_ok=False)


def test_parallel_copies_publish_every_file(target):
    sink = Sink(target[0], "many", storage_options=target[1])
    files = {f"part-{i:03d}.parquet": bytes([i]) * (i + 1) for i in range(48)}
    txn, manifest = stage(sink, "1", files)
    assert sink.storage.copy_workers == 16
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    assert_invariant(sink, {"1": sorted(files.values())}, open_staging_ok=False)


def test_ranged_reads_and_listing(target):
    storage, root = open_storage(*target)
    body = bytes(range(256)) * 1024
    storage.put(storage.join(root, "d/e/f.bin"), body)
    storage.put(storage.join(root, "d/g.bin"), b"g")
    with storage.open_input(storage.join(root, "d/e/f.bin")) as fh:
        fh.seek(-10, io.SEEK_END)
        assert fh.read() == body[-10:]
        fh.seek(1000)
        assert fh.read(5) == body[1000:1005]
    assert b"".join(storage.iter_chunks(storage.join(root, "d/g.bin"))) == b"g"
    assert storage.list_dirs(storage.join(root, "d")) == ["e"]
    assert sorted(o.path for o in storage.list(storage.join(root, "d"))) == \
        [storage.join(root, "d/e/f.bin"), storage.join(root, "d/g.bin")]
    storage.delete_prefix(storage.join(root, "d"))
    assert storage.list(root) == [] and storage.read_bytes(storage.join(root, "d/g.bin")) is None


@pytest.mark.parametrize(("uri", "options", "says"), [
    ("az://Bad_Container/t", {}, "not an Azure container name"),
    ("az://ab/t", {}, "not an Azure container name"),
    ("az:///t", {}, "no container"),
    ("az://lake/t?sv=2020&sig=SECRET", {}, "query or fragment"),
    ("abfs://lake:SECRET@acct.dfs.core.windows.net/t", {}, "user:password"),
    ("abfss://lake@localhost/t", {}, "does not name an account host"),
    ("abfss://lake@acct.dfs.core.windows.net/t", {"account_name": "other"}, "must agree"),
    ("az://lake/t", {"acount_key": "SECRET"}, "not known"),
    ("az://lake/t", {"endpoint_url": "http://u:SECRET@127.0.0.1:1/x"}, "user name or password"),
])
def test_bad_targets_and_options_are_refused_clearly(uri, options, says):
    with pytest.raises((UnsupportedStorage, ValueError), match=says) as err:
        open_storage(uri, options)
    assert "SECRET" not in str(err.value)


def test_abfs_names_its_account_and_spells_its_uris(azurite):
    container = azurite.new_container()
    uri = f"abfss://{container}@{'devstoreaccount1'}.dfs.core.windows.net/t"
    sink = Sink(uri, "abfs", storage_options={**azurite.options(), "account_name": None})
    txn, manifest = stage(sink, "1", {"a.parquet": b"A"})
    sink.commit(txn, expected_digest=manifest.digest)
    [published] = sink.committed_files()["1"]
    assert published.startswith(f"abfss://{container}@devstoreaccount1.dfs.core.windows.net/t/")
    assert storage_class(uri) is AzureStorage
    assert AzureStorage.browser_url(uri) == \
        f"https://devstoreaccount1.blob.core.windows.net/{container}/t"


def test_a_wrong_key_is_denied_and_never_shown(azurite, target):
    wrong = "V1JPTkcta2V5LW5ldmVyLXNob3du" * 3
    sink_opts = {**target[1], "account_key": wrong}
    storage, root = open_storage(target[0], sink_opts)
    with pytest.raises(StorageError) as err:
        storage.put_if_absent(storage.join(root, "x"), b"x")
    assert err.value.denied and str(err.value).endswith("failed: AuthorizationFailure (403)")
    assert wrong not in str(err.value) and wrong not in repr(storage)
    assert azurite.options()["account_key"] not in repr(open_storage(*target)[0])
    assert open_storage(*target)[0].list(root) == []  # nothing was written


def test_missing_container_is_one_clear_error_and_writes_nothing(azurite):
    sink = Sink("az://no-such-container/t", "ns", storage_options=azurite.options())
    with pytest.raises(StorageError, match="ContainerNotFound"):
        sink.begin("1")


@pytest.mark.parametrize("scheme", ["gs", "gcs"])
def test_gcs_is_refused_with_the_reason(scheme):
    for ask in (lambda: open_storage(f"{scheme}://bucket/t"),
                lambda: storage_class(f"{scheme}://bucket/t"),
                lambda: Sink(f"{scheme}://bucket/t", "ns")):
        with pytest.raises(UnsupportedStorage, match="ifGenerationMatch=0") as err:
            ask()
        assert "no GCS emulator" in str(err.value)


def test_cli_on_an_az_target(azurite, target, capsys, monkeypatch):
    """The CLI finds credentials where Azure's tools put them (the environment)."""
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    sink = Sink(target[0], "cli-az", storage_options=target[1])
    done, _ = stage(sink, "2026-11-01", {"a.parquet": b"A"})
    sink.commit(done)
    pending, _ = stage(sink, "2026-11-02", {"b.parquet": b"B"})
    assert main(["status", target[0], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["committed_epochs"] == ["2026-11-01"]
    before = full_snapshot(sink)
    assert main(["abort", target[0], "--epoch", "2026-11-01"]) == 2  # committed: refused
    assert "error:" in capsys.readouterr().err
    assert_same(before, full_snapshot(sink))
    assert main(["abort", target[0], "--epoch", "2026-11-02"]) == 0
    assert main(["recover", target[0]]) == 0 and main(["gc", target[0]]) == 0
    assert_invariant(sink, {"2026-11-01": [b"A"]}, open_staging_ok=False)


def test_pyarrow_and_duckdb_read_committed_output(azurite, target):
    """Readers reach the published files through adlfs (fsspec): pyarrow's dataset, and
    DuckDB with that file system registered (its own azure extension is not installed
    here)."""
    import adlfs
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = Sink(target[0], "readers", storage_options=target[1])
    for epoch, rows in (("1", [1, 2]), ("1", [3, 4, 5]), ("2", [6])):  # epoch 1 replaced
        buf = io.BytesIO()
        pq.write_table(pa.table({"x": rows}), buf)
        txn, manifest = stage(sink, epoch, {"part-0.parquet": buf.getvalue()})
        sink.commit(txn, expected_digest=manifest.digest)
    files = [u for uris in sink.committed_files().values() for u in uris]
    fs = adlfs.AzureBlobFileSystem(connection_string=azurite.connection_string())
    paths = [u.split("://", 1)[1] for u in files]
    assert sorted(pq.read_table(paths, filesystem=fs).column("x").to_pylist()) == [3, 4, 5, 6]
    con = duckdb.connect()
    con.register_filesystem(fs)
    got = con.sql(f"select sum(x), count(*) from read_parquet({files!r})").fetchall()
    assert got == [(18, 4)]
