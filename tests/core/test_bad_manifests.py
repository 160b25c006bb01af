"""Bad input gets a clear error and changes nothing: >= 20 kinds of bad manifest or staging."""

from __future__ import annotations

import json
import os

import pytest

from airflow_tpc import ManifestError, Sink, TxnState
from airflow_tpc.core.manifest import MANIFEST_NAME, digest_of

from .helpers import full_tree, snapshot, stage


def _redigest(doc):
    doc["digest"] = digest_of(doc)
    return doc


def _files(doc):
    return doc["files"]


# name -> (mutation of the manifest document or None, redigest, expected message fragment)
DOC_TAMPERING = {
    "not-json": (lambda d: b"{not json", False, "not valid JSON"),
    "truncated": (lambda d: json.dumps(d).encode()[:40], False, "not valid JSON"),
    "array": (lambda d: [d], False, "not a JSON object"),
    "wrong-format": (lambda d: {**d, "format": "delta"}, True, "not an airflow-tpc manifest"),
    "unknown-version": (lambda d: {**d, "version": 99}, True, "unknown version 99"),
    "digest-mismatch": (lambda d: {**d, "created_at": 1.0}, False, "digest does not match"),
    "missing-field": (lambda d: {k: v for k, v in d.items() if k != "staging"}, True,
                      "missing or mistypes"),
    "absolute-path": (lambda d: _set_path(d, "/etc/passwd"), True, "absolute"),
    "dotdot-path": (lambda d: _set_path(d, "../../epoch=1/x.parquet"), True, "escapes staging"),
    "url-path": (lambda d: _set_path(d, "s3://other/x.parquet"), True, "absolute"),
    "hidden-path": (lambda d: _set_path(d, "_hidden/x.parquet"), True, "hidden component"),
    "duplicate-entry": (lambda d: {**d, "files": d["files"] + d["files"][:1]}, True, "twice"),
    "negative-size": (lambda d: _set(d, "size", -1), True, "invalid size"),
    "bool-size": (lambda d: _set(d, "size", True), True, "invalid size"),
    "bad-checksum": (lambda d: _set(d, "checksum", "crc32:zz zz"), True, "invalid checksum"),
    "negative-rows": (lambda d: _set(d, "rows", -5), True, "invalid row count"),
    "extra-entry-key": (lambda d: _set(d, "owner", "me"), True, "malformed file entry"),
    "totals-mismatch": (lambda d: {**d, "totals": {**d["totals"], "bytes": 1}}, True,
                        "totals"),
    "wrong-epoch": (lambda d: {**d, "txn": {**d["txn"], "epoch": "2"},
                               "txn_id": d["txn_id"].replace("/1/", "/2/")}, True,
                    "epoch '2'"),
    "stale-attempt": (lambda d: {**d, "txn": {**d["txn"], "attempt": 1},
                                 "txn_id": d["txn_id"][:-1] + "1"}, True, "attempt 1"),
    "wrong-namespace": (lambda d: {**d, "txn": {**d["txn"], "namespace": "other"},
                                   "txn_id": "other" + d["txn_id"][len("bad"):]}, True,
                        "namespace 'other'"),
    "wrong-staging": (lambda d: {**d, "staging": d["staging"] + "x"}, True, "staging"),
}


def _set(d, key, value):
    d = json.loads(json.dumps(d))
    d["files"][0][key] = value
    return d


def _set_path(d, path):
    return _set(d, "path", path)


@pytest.fixture()
def epoch_in_progress(store):
    """Epoch 1 published (attempt 1); attempt 2 staged and pre-committed."""
    target, options = store
    sink = Sink(target, "bad", storage_options=options)
    txn1, _ = stage(sink, "1", {"a.parquet": b"published A", "b.parquet": b"published B"})
    sink.commit(txn1)
    txn2, manifest = stage(sink, "1", {"a.parquet": b"new A", "c/d.parquet": b"new D"})
    return sink, txn2, manifest


def _manifest_path(sink, txn):
    return sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), MANIFEST_NAME)


def _refused_and_unchanged(sink, txn, match, **kwargs):
    before = full_tree(sink)  # ledger, staging (beside the target) and data, byte for byte
    with pytest.raises(ManifestError, match=match):
        sink.commit(txn, **kwargs)
    assert full_tree(sink) == before
    assert sink.describe("1")[-1].state is TxnState.PRECOMMITTED
    assert sink.committed_files()["1"] and all("a000002" not in u for u in
                                               sink.committed_files()["1"])


@pytest.mark.parametrize("kind", sorted(DOC_TAMPERING))
def test_tampered_manifest_document(epoch_in_progress, kind):
    sink, txn, manifest = epoch_in_progress
    mutate, redigest, match = DOC_TAMPERING[kind]
    doc = mutate(manifest.to_dict())
    if isinstance(doc, dict) and redigest:
        doc = _redigest(doc)
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    sink.storage.put(_manifest_path(sink, txn), data)
    _refused_and_unchanged(sink, txn, match)


def _staged(sink, txn, rel):
    return sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), rel)


def test_file_missing_from_storage(epoch_in_progress):
    sink, txn, _ = epoch_in_progress
    sink.storage.delete_files([_staged(sink, txn, "c/d.parquet")])
    _refused_and_unchanged(sink, txn, "missing from staging")


def test_file_size_changed(epoch_in_progress):
    sink, txn, _ = epoch_in_progress
    sink.storage.put(_staged(sink, txn, "a.parquet"), b"new A plus more")
    _refused_and_unchanged(sink, txn, "bytes in storage but the manifest says")


def test_file_content_altered_same_size(epoch_in_progress):
    sink, txn, _ = epoch_in_progress
    sink.storage.put(_staged(sink, txn, "a.parquet"), b"NEW a")
    _refused_and_unchanged(sink, txn, "does not match its manifest checksum")


def test_unlisted_file_in_staging(epoch_in_progress):
    sink, txn, _ = epoch_in_progress
    sink.storage.put(_staged(sink, txn, "sneaky.parquet"), b"not in the manifest")
    _refused_and_unchanged(sink, txn, "does not list")


def test_pointer_digest_differs_from_storage(epoch_in_progress):
    sink, txn, _ = epoch_in_progress
    _refused_and_unchanged(sink, txn, "changed after pre-commit",
                           expected_digest="sha256:" + "0" * 64)


def test_symlink_leading_out_of_staging(tmp_path):
    """Local only: object stores have no symlinks."""
    sink = Sink(str(tmp_path / "target"), "bad")
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    secret = tmp_path / "outside.txt"
    secret.write_bytes(b"secret")
    os.symlink(secret, _staged(sink, txn, "link.parquet"))
    before = snapshot(sink, include_ledger=True)
    with pytest.raises(ManifestError, match="symlink"):
        sink.commit(txn)
    assert snapshot(sink, include_ledger=True) == before
    assert sink.committed_files() == {}


def test_secret_never_in_error_messages(s3_options, s3_bucket):
    bad = dict(s3_options, endpoint_url="http://127.0.0.1:9", max_attempts=1)  # nothing there
    sink = Sink(f"s3://{s3_bucket}/t", "leaky", storage_options=bad)
    with pytest.raises(Exception) as info:  # noqa: PT011 - any error, as long as it is clean
        sink.begin("1")
    text = f"{info.value!s} {info.value!r} {sink!r} {sink.storage!r}"
    assert "S3" in text and s3_options["secret"] not in text


@pytest.mark.parametrize("kind", sorted(k for k in DOC_TAMPERING
                                        if k not in ("not-json", "truncated", "array")))
def test_tampered_manifest_in_canonical_form_is_refused(kind):
    """A manifest file is canonical JSON, and its digest is checked on its bytes (the
    body's canonical form is the file minus the digest member): every tampering is
    refused on that path too, with the same message as in any other form."""
    from airflow_tpc.core.manifest import FileEntry, Manifest, canonical_json

    files = [FileEntry("a.parquet", 5, "sha256:" + "a" * 64),
             FileEntry("c/d.parquet", 6, "md5:ab", 3)]
    manifest = Manifest.build(namespace="bad", target="file:///t", epoch="1", attempt=2,
                              staging="/t/s", files=files)
    mutate, redigest, match = DOC_TAMPERING[kind]
    doc = mutate(manifest.to_dict())
    if redigest:
        doc = _redigest(doc)
    with pytest.raises(ManifestError, match=match):
        parsed = Manifest.parse(canonical_json(doc))
        parsed.check_transaction(namespace="bad", target="file:///t", epoch="1", attempt=2,
                                 staging="/t/s")


def test_manifest_bytes_parse_as_their_document_in_any_form():
    """The digest checked on a canonical file's bytes and the digest recomputed from a
    re-formatted one agree; a flipped byte in a canonical file is refused."""
    from airflow_tpc.core.manifest import FileEntry, Manifest, canonical_json

    manifest = Manifest.build(namespace="n", target="file:///t", epoch="é", attempt=1,
                              staging="/t/s", files=[FileEntry(f"p={i}/x\u00e9.parquet", i,
                                                               "sha256:" + "b" * 64, i)
                                                     for i in range(50)])
    raw = manifest.to_json_bytes()
    assert raw == canonical_json(manifest.to_dict())
    doc = manifest.to_dict()
    parsed = Manifest.parse(doc)
    assert parsed.files == manifest.files and parsed.digest == manifest.digest
    for form in (raw, raw.decode(), json.dumps(doc, indent=2).encode()):
        assert Manifest.parse(form) == parsed
    flipped = raw.replace(b'"size":7}', b'"size":8}', 1)
    assert flipped != raw
    with pytest.raises(ManifestError, match="digest does not match"):
        Manifest.parse(flipped)
