"""The proxy itself: transparent when idle, each fault kind does what it claims.

The suite's conclusions are only as good as the proxy: a proxy that corrupted a
body or mis-classified an operation would test nothing.  So: bodies of every
framing arrive byte for byte, each S3 operation lands in its class, and each
fault kind is seen by a client with retries off exactly as documented —
including whether the request took effect.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import time
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from airflow_tpc.storage.s3 import S3Storage

from .conftest import options_for
from .proxy import Fault, FaultPlan, FaultProxy, Op, classify


def _client(endpoint: str, retries: int = 0) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing-secret-key", region_name="us-east-1",
                        config=Config(retries={"mode": "standard", "max_attempts": retries}))


def _exists(client: Any, bucket: str, key: str) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
        return True
    except botocore.exceptions.ClientError:
        return False


def test_every_operation_is_classified(proxy: FaultProxy, fault_bucket: str) -> None:
    c, b = _client(proxy.endpoint), fault_bucket
    seen: list[Op] = []

    def note(req: Any, op: Op, n: int) -> None:
        seen.append(op)

    proxy.script = note
    c.put_object(Bucket=b, Key="k", Body=b"v")
    c.put_object(Bucket=b, Key="k2", Body=b"v", IfNoneMatch="*")
    etag = c.head_object(Bucket=b, Key="k")["ETag"]
    c.put_object(Bucket=b, Key="k", Body=b"w", IfMatch=etag)
    c.copy_object(Bucket=b, Key="k3", CopySource={"Bucket": b, "Key": "k"})
    c.get_object(Bucket=b, Key="k")["Body"].read()
    c.list_objects_v2(Bucket=b, Prefix="k")
    up = c.create_multipart_upload(Bucket=b, Key="m")["UploadId"]
    part = c.upload_part(Bucket=b, Key="m", UploadId=up, PartNumber=1, Body=b"p")
    c.complete_multipart_upload(Bucket=b, Key="m", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    c.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "k2"}]})
    c.delete_object(Bucket=b, Key="k3")
    assert seen == [Op.PUT, Op.CONDITIONAL_PUT, Op.HEAD, Op.CONDITIONAL_PUT, Op.COPY, Op.GET,
                    Op.LIST, Op.MULTIPART, Op.MULTIPART, Op.MULTIPART, Op.DELETE, Op.DELETE]
    assert proxy.stats.requests[Op.MULTIPART] == 3 and not proxy.stats.injected


def test_classify_upload_part_copy_is_multipart() -> None:
    from .proxy import Request

    req = Request("PUT", "/b/k?partNumber=1&uploadId=abc", {"x-amz-copy-source": "b/src"})
    assert classify(req) is Op.MULTIPART
    assert classify(Request("GET", "/b", {})) is Op.LIST
    assert classify(Request("POST", "/b?delete", {})) is Op.DELETE


def test_every_azure_operation_is_classified(azurite: Any) -> None:
    """Azure Blob calls (Azurite, through the proxy) land in S3's classes: the benchmark's
    request counts compare the stores by them (bench/report_stores.py)."""
    from azure.core import MatchConditions
    from azure.storage.blob import BlobBlock, BlobServiceClient

    upstream = azurite.endpoint.rsplit("/", 1)[0]
    seen: list[Op] = []
    with FaultProxy(upstream) as proxy:
        proxy.script = lambda req, op, n: seen.append(op)
        account = azurite.options()
        service = BlobServiceClient(f"{proxy.endpoint}/{account['account_name']}",
                                    credential={"account_name": account["account_name"],
                                                "account_key": account["account_key"]})
        container = service.create_container(f"cls-{time.monotonic_ns()}")
        blob = container.get_blob_client("k")
        blob.upload_blob(b"v", overwrite=True)
        container.get_blob_client("k2").upload_blob(b"v", overwrite=False)
        etag = blob.get_blob_properties().etag
        blob.upload_blob(b"w", overwrite=True, etag=etag,
                         match_condition=MatchConditions.IfNotModified)
        container.get_blob_client("k3").start_copy_from_url(blob.url)
        blob.download_blob().readall()
        list(container.list_blobs())
        multi = container.get_blob_client("m")
        multi.stage_block("YQ==", b"p")
        multi.commit_block_list([BlobBlock("YQ==")])
        blob.delete_blob()
        container.delete_container()
    assert seen == [Op.OTHER, Op.PUT, Op.CONDITIONAL_PUT, Op.HEAD, Op.CONDITIONAL_PUT, Op.COPY,
                    Op.GET, Op.LIST, Op.MULTIPART, Op.MULTIPART, Op.DELETE, Op.DELETE]


def test_bodies_arrive_byte_for_byte(proxy: FaultProxy, fault_bucket: str,
                                     direct_client: Any) -> None:
    """Content-Length, Expect: 100-continue, multipart, s3fs and raw chunked uploads."""
    c, b = _client(proxy.endpoint), fault_bucket
    blob = bytes(range(256)) * 40_000  # ~10 MB
    c.put_object(Bucket=b, Key="plain", Body=blob[:1_000_003])
    c.put_object(Bucket=b, Key="fileobj", Body=io.BytesIO(blob[:300_001]))  # Expect: 100-continue
    started = time.monotonic()
    c.upload_fileobj(io.BytesIO(blob), b, "multipart",
                     Config=TransferConfig(multipart_threshold=5 * 1024**2,
                                           multipart_chunksize=5 * 1024**2))
    assert time.monotonic() - started < 5  # no client waited out a 100-continue
    S3Storage(options_for(proxy.endpoint)).put(f"{b}/s3fs", blob[:77_777])

    # A raw chunked PUT (moto does not check signatures; the framing is the point).
    host = urlsplit(proxy.endpoint)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=10)
    conn.putrequest("PUT", f"/{b}/chunked")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for piece in (blob[:10], blob[10:70_000], blob[70_000:70_001]):
        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    conn.send(b"0\r\n\r\n")
    assert conn.getresponse().status == 200
    conn.close()

    got = {k: direct_client.get_object(Bucket=b, Key=k)["Body"].read()
           for k in ("plain", "fileobj", "multipart", "s3fs", "chunked")}
    assert got == {"plain": blob[:1_000_003], "fileobj": blob[:300_001], "multipart": blob,
                   "s3fs": blob[:77_777], "chunked": blob[:70_001]}
    # And back out through the proxy, including a ranged GET and a HEAD (no body).
    assert c.get_object(Bucket=b, Key="multipart")["Body"].read() == blob
    assert c.get_object(Bucket=b, Key="plain", Range="bytes=5-9")["Body"].read() == blob[5:10]
    assert c.head_object(Bucket=b, Key="plain")["ContentLength"] == 1_000_003


@pytest.mark.parametrize(("fault", "error", "took_effect"), [
    (Fault.ERROR_500, "InternalError", False),
    (Fault.SLOWDOWN_503, "SlowDown", False),
    (Fault.DROP_BEFORE, "ConnectionClosedError", False),
    (Fault.DROP_AFTER, "ConnectionClosedError", True),
    (Fault.ERROR_500_AFTER, "InternalError", True),
])
def test_each_fault_kind(proxy: FaultProxy, fault_bucket: str, direct_client: Any,
                         fault: Fault, error: str, took_effect: bool) -> None:
    """With retries off, the client sees the fault; only the *_after kinds took effect."""
    proxy.plan = FaultPlan({Op.CONDITIONAL_PUT: {fault: 1.0}})
    c = _client(proxy.endpoint)
    with pytest.raises((botocore.exceptions.BotoCoreError,
                        botocore.exceptions.ClientError)) as info:
        c.put_object(Bucket=fault_bucket, Key="k", Body=b"v", IfNoneMatch="*")
    assert error in (type(info.value).__name__ + str(info.value))
    assert _exists(direct_client, fault_bucket, "k") is took_effect
    assert proxy.stats.injected == {(Op.CONDITIONAL_PUT, fault): 1}
    assert proxy.stats.forwarded[Op.CONDITIONAL_PUT] == (1 if took_effect else 0)
    # The connection pool recovers: the next request on a fresh connection works.
    proxy.plan = FaultPlan.none()
    c.put_object(Bucket=fault_bucket, Key="after", Body=b"ok")


def test_head_errors_have_no_body(proxy: FaultProxy, fault_bucket: str) -> None:
    proxy.plan = FaultPlan({Op.HEAD: {Fault.SLOWDOWN_503: 1.0}})
    with pytest.raises(botocore.exceptions.ClientError) as info:
        _client(proxy.endpoint).head_object(Bucket=fault_bucket, Key="k")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503


def test_latency_is_added(proxy: FaultProxy, fault_bucket: str) -> None:
    proxy.plan = FaultPlan(latency_rate=1.0, latency_s=(0.2, 0.2))
    c = _client(proxy.endpoint)
    started = time.monotonic()
    c.put_object(Bucket=fault_bucket, Key="slow", Body=b"v")
    assert time.monotonic() - started >= 0.2
    assert proxy.stats.injected == {(Op.PUT, Fault.LATENCY): 1}


def test_sdk_retries_through_faults_and_counts(proxy: FaultProxy, fault_bucket: str) -> None:
    """The first two attempts fail, the third succeeds: one call, three attempts, counted."""
    proxy.script = lambda req, op, n: Fault.SLOWDOWN_503 if op is Op.PUT and n < 2 else None
    _client(proxy.endpoint, retries=2).put_object(Bucket=fault_bucket, Key="k", Body=b"v")
    (call,) = proxy.stats.invocations.values()
    assert (call.op, sorted(call.attempts)) == (Op.PUT, [1, 2, 3])
    assert proxy.stats.injected_by_kind() == {Fault.SLOWDOWN_503: 2}


def _fates(proxy: FaultProxy, bucket: str) -> list[tuple[str, str, str, str]]:
    c = _client(proxy.endpoint)
    for i in range(60):
        with contextlib.suppress(botocore.exceptions.BotoCoreError,
                                 botocore.exceptions.ClientError):
            c.put_object(Bucket=bucket, Key=f"k{i % 7}", Body=b"v")
    return list(proxy.stats.log)


def test_same_seed_same_faults(moto_endpoint: str, direct_client: Any) -> None:
    """Fates depend on (seed, request line, repetition) only: not on the bucket or timing."""
    runs = []
    for bucket, seed in (("seed-a", 11), ("seed-b", 11), ("seed-c", 12)):
        direct_client.create_bucket(Bucket=bucket)
        with FaultProxy(moto_endpoint, FaultPlan.uniform(0.3), seed=seed) as p:
            runs.append([(op, fault, method, path.split("/", 2)[2])
                         for op, fault, method, path in _fates(p, bucket)])
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert 5 < len(runs[0]) < 40
