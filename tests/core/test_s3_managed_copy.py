"""Large objects are promoted with boto3's managed multipart copy (s3transfer), on moto.

What the hand-written ``UploadPartCopy`` loop did, and more: parts in parallel, the
upload aborted on failure, and every part conditional on the verified source ETag
— a source rewritten after pre-commit fails the copy instead of publishing a mix.
"""

from __future__ import annotations

import hashlib

import boto3
import pytest

from airflow_tpc.errors import StorageError
from airflow_tpc.storage.s3 import S3Storage

MiB = 1024 * 1024


def counting(storage: S3Storage) -> list[tuple[str, dict]]:
    calls: list[tuple[str, dict]] = []
    storage.client.meta.events.register(
        "before-parameter-build.s3.*",
        lambda params, model, **kw: calls.append((model.name, dict(params))))
    return calls


@pytest.fixture()
def big(s3_options, s3_bucket):
    """A 12 MiB source object and a storage that copies it in 5 MiB parts."""
    storage = S3Storage(s3_options, multipart_threshold=8 * MiB, multipart_chunk=5 * MiB)
    data = hashlib.sha256(b"x").digest() * (12 * MiB // 32)
    src = f"{s3_bucket}/staging/part-0.parquet"
    storage.put(src, data)
    etag = storage.client.head_object(Bucket=s3_bucket, Key="staging/part-0.parquet")["ETag"]
    return storage, src, data, etag.strip('"')


def test_a_large_object_is_copied_in_parts_conditional_on_the_verified_etag(big, s3_bucket):
    storage, src, data, etag = big
    calls = counting(storage)
    dst = f"{s3_bucket}/target/epoch=1/part-0.a000001.parquet"
    storage.copy_many([(src, dst)], {src: len(data)}, {src: etag})
    assert storage.read_bytes(dst) == data
    names = [name for name, _ in calls]
    assert names.count("UploadPartCopy") == 3, names
    assert "HeadObject" not in names and "CopyObject" not in names  # the manifest knew
    for name, params in calls:
        if name == "UploadPartCopy":
            assert params["CopySourceIfMatch"].strip('"') == etag


def test_without_a_known_etag_the_source_is_read_once_and_still_guarded(big, s3_bucket):
    storage, src, data, _ = big
    calls = counting(storage)
    dst = f"{s3_bucket}/target/epoch=1/part-0.a000002.parquet"
    storage.copy_many([(src, dst)], {src: len(data)})
    assert storage.read_bytes(dst) == data
    names = [name for name, _ in calls]
    assert names.count("HeadObject") == 1 and names.count("UploadPartCopy") == 3, names
    assert all("CopySourceIfMatch" in p for n, p in calls if n == "UploadPartCopy")


def test_a_failed_part_copy_fails_clearly_and_leaves_no_upload(big, s3_bucket, s3_options):
    """(moto does not enforce CopySourceIfMatch on parts — real S3 does, with a 412 that
    the same path reports as "changed after it was verified" — so the failure here is a
    source that vanished after verification.)"""
    storage, src, data, etag = big
    storage.delete_files([src])
    dst = f"{s3_bucket}/target/epoch=1/part-0.a000003.parquet"
    with pytest.raises(StorageError, match=r"S3 copy of s3://.*part-0.parquet failed") as err:
        storage.copy_many([(src, dst)], {src: len(data)}, {src: etag})
    assert "Traceback" not in str(err.value) and "botocore" not in str(err.value)
    assert storage.read_bytes(dst) is None
    client = boto3.client("s3", endpoint_url=s3_options["endpoint_url"],
                          aws_access_key_id=s3_options["key"],
                          aws_secret_access_key=s3_options["secret"],
                          region_name=s3_options["region_name"])
    assert client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def test_small_objects_stay_single_copies_checked_by_their_answer(s3_options, s3_bucket):
    storage = S3Storage(s3_options)
    src = f"{s3_bucket}/staging/small.parquet"
    storage.put(src, b"small")
    etag = storage.client.head_object(Bucket=s3_bucket, Key="staging/small.parquet")["ETag"]
    calls = counting(storage)
    dst = f"{s3_bucket}/target/small.parquet"
    storage.copy_many([(src, dst)], {src: 5}, {src: etag.strip('"')})
    assert [name for name, _ in calls] == ["CopyObject"]
    storage.put(src, b"other")
    with pytest.raises(StorageError, match="changed after it was verified"):
        storage.copy_many([(src, dst + "2")], {src: 5}, {src: etag.strip('"')})


@pytest.mark.parametrize("size", [5, 12 * MiB], ids=["copy-object", "multipart"])
def test_a_source_rewritten_after_verification_is_refused_by_a_real_s3(seaweed, size):
    """SeaweedFS enforces ``CopySourceIfMatch`` (moto does not): a staged file rewritten
    after its ETag was verified makes the store refuse the copy (412), which reads as
    the clear error, and nothing lands at the destination — single copies and every
    part of a managed multipart copy alike."""
    storage = S3Storage(seaweed.s3_options(), multipart_threshold=8 * MiB,
                        multipart_chunk=5 * MiB)
    prefix = seaweed.new_prefix()[len("s3://"):]
    bucket, _, key = prefix.partition("/")
    src, dst = f"{prefix}/staging/part-0.parquet", f"{prefix}/target/part-0.parquet"
    storage.put(src, b"a" * size)
    etag = storage.client.head_object(Bucket=bucket, Key=f"{key}/staging/part-0.parquet")
    storage.put(src, b"b" * size)  # rewritten after the verification
    with pytest.raises(StorageError, match="changed after it was verified") as err:
        storage.copy_many([(src, dst)], {src: size}, {src: etag["ETag"].strip('"')})
    assert "botocore" not in str(err.value)
    assert storage.read_bytes(dst) is None
    assert seaweed.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    # The same copy with the current ETag goes through: the refusal was the guard's.
    current = storage.client.head_object(Bucket=bucket, Key=f"{key}/staging/part-0.parquet")
    storage.copy_many([(src, dst)], {src: size}, {src: current["ETag"].strip('"')})
    assert storage.read_bytes(dst) == b"b" * size
