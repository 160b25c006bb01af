"""A fault-injecting HTTP proxy in front of moto's S3 server.

Why a proxy and not a wrapper around :class:`~airflow_tpc.storage.Storage`: the
failures that break object-store commit protocols happen *below* the client —
a request that took effect but whose response never arrived, a 503 that the
SDK retries on its own, a retried conditional put that now sees its own write.
Only real HTTP between the real clients (boto3 and s3fs/aiobotocore, with their
own retry loops) and a real server reproduces them.

The proxy forwards every request's bytes unchanged (so the ``Host`` header and
the SigV4 signature stay valid), framing bodies by ``Content-Length`` or
``Transfer-Encoding: chunked`` (which also carries ``aws-chunked`` uploads).  It
answers ``Expect: 100-continue`` itself and drops that header upstream, so
clients never wait for a continue that moto would not send through us.

Per request it classifies the S3 operation (:class:`Op`) and draws a fate
(:class:`Fault`) from a :class:`FaultPlan`.  The draw is a hash of (seed,
request line, how many times that request line was seen), not a shared RNG
stream, so a seed reproduces the same fates even when a thread pool sends
requests in a different order.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import random
import socket
import socketserver
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO
from urllib.parse import parse_qsl, urlsplit

_CHUNK = 64 * 1024
_MAX_LINE = 65536


class Op(str, enum.Enum):
    """S3 operation kinds, as far as method + query + headers tell them apart."""

    GET = "get"
    LIST = "list"
    PUT = "put"
    CONDITIONAL_PUT = "conditional_put"
    COPY = "copy"
    DELETE = "delete"
    HEAD = "head"
    MULTIPART = "multipart"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


class Fault(str, enum.Enum):
    """What the proxy does to one request instead of (or around) forwarding it."""

    #: 500 InternalError before forwarding: the request never took effect.
    ERROR_500 = "500"
    #: 503 SlowDown before forwarding (the SDK treats it as throttling).
    SLOWDOWN_503 = "503"
    #: Close the client socket without forwarding: never took effect, no answer.
    DROP_BEFORE = "drop_before"
    #: Forward, let moto apply it, then close without answering: took effect,
    #: the client never hears.  The nasty case for conditional puts.
    DROP_AFTER = "drop_after"
    #: Forward, let moto apply it, then answer 500: S3 documents that a 500 on a
    #: write may or may not have been applied.
    ERROR_500_AFTER = "500_after"
    #: Forward, then send the response head and only half its body, and close:
    #: a connection cut mid-download (the client must not take the prefix as data).
    TRUNCATE = "truncate"
    #: Extra delay (independent of the other kinds; the request then proceeds).
    LATENCY = "latency"

    def __str__(self) -> str:
        return self.value


FAILING = (Fault.ERROR_500, Fault.SLOWDOWN_503, Fault.DROP_BEFORE, Fault.DROP_AFTER,
           Fault.ERROR_500_AFTER, Fault.TRUNCATE)


@dataclass
class FaultPlan:
    """Probabilities of each failing fault kind per operation, plus latency.

    ``rates[op][fault]`` is the chance that one request of ``op`` gets ``fault``;
    the failing kinds of one op must sum to at most 1.  Latency is drawn
    separately: ``latency_rate`` of requests (of any op) sleep a uniform
    ``latency_s`` range first, and still go through.
    """

    rates: dict[Op, dict[Fault, float]] = field(default_factory=dict)
    latency_rate: float = 0.0
    latency_s: tuple[float, float] = (0.005, 0.03)

    @classmethod
    def uniform(cls, rate: float, *, kinds: tuple[Fault, ...] = FAILING,
                ops: tuple[Op, ...] = tuple(Op), latency_rate: float = 0.0,
                latency_s: tuple[float, float] = (0.005, 0.03)) -> FaultPlan:
        """``rate`` of every op's requests fail, split evenly over ``kinds``."""
        each = rate / len(kinds) if kinds else 0.0
        return cls({op: {k: each for k in kinds} for op in ops}, latency_rate, latency_s)

    @classmethod
    def none(cls) -> FaultPlan:
        return cls()

    def __post_init__(self) -> None:
        for op, table in self.rates.items():
            if Fault.LATENCY in table:
                raise ValueError("latency is configured with latency_rate, not per-op rates")
            if sum(table.values()) > 1.0 + 1e-9:
                raise ValueError(f"fault rates of {op} sum to more than 1")

    def draw(self, op: Op, rng: random.Random) -> tuple[Fault | None, float]:
        """(failing fault or None, seconds of added latency) for one request."""
        delay = 0.0
        if self.latency_rate and rng.random() < self.latency_rate:
            delay = rng.uniform(*self.latency_s)
        u = rng.random()
        for fault, p in self.rates.get(op, {}).items():
            if u < p:
                return fault, delay
            u -= p
        return None, delay


@dataclass(frozen=True)
class Request:
    """The parsed head of one proxied request (the raw bytes travel separately)."""

    method: str
    target: str
    headers: dict[str, str]  # lower-cased names; the last value wins

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.target).query, keep_blank_values=True))


def classify(req: Request) -> Op:
    """The S3 operation of a path-style request (moto on an IP endpoint is path-style),
    or the Azure Blob operation of one (:func:`classify_azure`: it carries x-ms-version)."""
    q = req.query
    h = req.headers
    if "x-ms-version" in h:
        return classify_azure(req)
    key = req.path.lstrip("/").partition("/")[2]
    if req.method == "HEAD":
        return Op.HEAD
    if "uploads" in q or "uploadId" in q:
        return Op.MULTIPART  # create / upload part / upload part copy / complete / abort / list
    if req.method == "POST" and "delete" in q:
        return Op.DELETE
    if req.method == "DELETE":
        return Op.DELETE
    if req.method == "PUT" and key:
        if "x-amz-copy-source" in h:
            return Op.COPY
        if "if-none-match" in h or "if-match" in h:
            return Op.CONDITIONAL_PUT
        return Op.PUT
    if req.method == "GET":
        if "list-type" in q or not key:
            return Op.LIST
        return Op.GET
    return Op.OTHER


def classify_azure(req: Request) -> Op:
    """The kind of an Azure Blob request, in S3's terms (the benchmark's request counts
    compare the two): Copy Blob (``x-ms-copy-source``) is a copy, List Blobs
    (``comp=list``) a list, Put Block / Put Block List a multipart upload, a blob batch a
    delete; container calls (``restype=container``) and other ``comp=`` calls are other."""
    q, h = req.query, req.headers
    comp = q.get("comp", "")
    if comp == "list":
        return Op.LIST
    if comp in ("block", "blocklist") and req.method == "PUT":
        return Op.MULTIPART
    if comp == "batch" or req.method == "DELETE":
        return Op.DELETE
    if req.method == "HEAD":
        return Op.HEAD
    if comp or "restype" in q:
        return Op.OTHER
    if req.method == "PUT":
        if "x-ms-copy-source" in h:
            return Op.COPY
        if "if-none-match" in h or "if-match" in h:
            return Op.CONDITIONAL_PUT
        return Op.PUT
    return Op.GET if req.method == "GET" else Op.OTHER


def _canonical(req: Request) -> str:
    """The request line without what differs between runs: bucket and multipart upload id."""
    q = sorted((k, v) for k, v in req.query.items() if k != "uploadId")
    key = req.path.lstrip("/").partition("/")[2]
    return f"{req.method} /{key}?{q}"


@dataclass
class Invocation:
    """The requests of one SDK API call (one ``amz-sdk-invocation-id``)."""

    op: Op
    client: str                                           # "botocore" or "aiobotocore"
    method: str
    attempts: Counter = field(default_factory=Counter)    # SDK attempt number -> requests

    @property
    def requests(self) -> int:
        return sum(self.attempts.values())


@dataclass
class Stats:
    """What went through the proxy.  Counters are per op (and per fault kind)."""

    requests: Counter = field(default_factory=Counter)          # op -> requests seen
    forwarded: Counter = field(default_factory=Counter)         # op -> reached moto
    injected: Counter = field(default_factory=Counter)          # (op, fault) -> count
    #: botocore and aiobotocore send ``amz-sdk-invocation-id`` (the same on every
    #: retry of one API call) and ``amz-sdk-request: attempt=N; max=M``.
    invocations: dict[str, Invocation] = field(default_factory=dict)
    max_declared: Counter = field(default_factory=Counter)      # declared max -> requests
    untracked: Counter = field(default_factory=Counter)         # op -> requests without id
    log: list[tuple[str, str, str, str]] = field(default_factory=list)  # op, fault, method, path

    def injected_by_kind(self) -> Counter:
        out: Counter = Counter()
        for (_, fault), n in self.injected.items():
            out[fault] += n
        return out

    def attempts_per_invocation(self) -> dict[Op, int]:
        """The most SDK attempts any one API call of each op made."""
        out: dict[Op, int] = defaultdict(int)
        for inv in self.invocations.values():
            out[inv.op] = max(out[inv.op], len(inv.attempts))
        return dict(out)

    def resends(self) -> list[Invocation]:
        """Calls where one SDK attempt reached the proxy more than once.

        aiohttp (under aiobotocore/s3fs) re-sends an idempotent request once when
        the server disconnects; that happens below the SDK's attempt counting.
        """
        return [inv for inv in self.invocations.values() if any(
            n > 1 for n in inv.attempts.values())]

    def invocation_count(self) -> Counter:
        return Counter(inv.op for inv in self.invocations.values())

    def summary(self) -> str:
        total = sum(self.requests.values())
        inj = ", ".join(f"{k}={v}" for k, v in sorted(self.injected_by_kind().items()))
        return f"{total} requests, injected: {inj or 'none'}"


class _Dropped(Exception):
    """The client or upstream went away mid-message."""


class FaultProxy:
    """A threaded proxy on 127.0.0.1 (free port) in front of an S3 endpoint.

    >>> with FaultProxy("http://127.0.0.1:5000", FaultPlan.uniform(0.1), seed=7) as proxy:
    ...     options = {"endpoint_url": proxy.endpoint, ...}
    """

    def __init__(self, upstream: str, plan: FaultPlan | None = None, *, seed: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.plan = plan or FaultPlan.none()
        self.seed = seed
        #: Targeted faults for unit tests: called with (request, op, n-th time this
        #: request line was seen); a Fault it returns wins over the plan's draw.
        self.script: Callable[[Request, Op, int], Fault | None] | None = None
        self.stats = Stats()
        self._lock = threading.Lock()
        self._seen: Counter = Counter()
        self._paused = 0
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> FaultProxy:
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                proxy._serve_connection(self.connection, self.rfile)

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fault-proxy",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "proxy not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No faults inside the block (requests are still counted)."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1

    def reset_stats(self) -> None:
        with self._lock:
            self.stats = Stats()

    # -- one client connection (keep-alive: several requests) ----------------
    def _serve_connection(self, conn: socket.socket, rfile: BinaryIO) -> None:
        with contextlib.suppress(_Dropped, OSError, ValueError):
            while self._serve_one(conn, rfile):
                pass

    def _serve_one(self, conn: socket.socket, rfile: BinaryIO) -> bool:
        """Proxy one request; False when the client connection must end."""
        head = _read_head(rfile)
        if head is None:
            return False
        lines = head.split(b"\r\n")
        method, target, _ = lines[0].decode("latin-1").split(" ", 2)
        headers = _parse_headers(lines[1:])
        req = Request(method, target, headers)
        op = classify(req)
        fault, delay = self._decide(req, op)

        if headers.get("expect", "").lower() == "100-continue":
            # Answer the continue ourselves; moto's reply to it would be an
            # interim response in the middle of our relay.
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            head = b"\r\n".join(ln for ln in lines
                                if not ln.lower().startswith(b"expect:"))
        keep_alive = "close" not in headers.get("connection", "").lower()

        if delay:
            time.sleep(delay)
        if fault in (Fault.DROP_BEFORE, Fault.ERROR_500, Fault.SLOWDOWN_503):
            _relay_body(rfile, headers, _discard)  # the request is read, then refused
            if fault is Fault.DROP_BEFORE:
                _hang_up(conn)
                return False
            conn.sendall(_error_response(req, fault, keep_alive))
            return keep_alive

        with socket.create_connection(self.upstream, timeout=60) as up:
            up.sendall(head)
            _relay_body(rfile, headers, up.sendall)
            ufile = up.makefile("rb")
            status, rhead, rheaders = _read_response_head(ufile)
            with self._lock:
                self.stats.forwarded[op] += 1
            if fault in (Fault.DROP_AFTER, Fault.ERROR_500_AFTER):
                _relay_response_body(ufile, method, status, rheaders, _discard)
                if fault is Fault.DROP_AFTER:
                    _hang_up(conn)
                    return False
                conn.sendall(_error_response(req, Fault.ERROR_500, keep_alive))
                return keep_alive
            if fault is Fault.TRUNCATE:
                body = bytearray()
                _relay_response_body(ufile, method, status, rheaders, body.extend)
                conn.sendall(rhead + bytes(body[: len(body) // 2]))
                _hang_up(conn)
                return False
            conn.sendall(rhead)
            until_eof = _relay_response_body(ufile, method, status, rheaders, conn.sendall)
        if until_eof or "close" in rheaders.get("connection", "").lower():
            return False
        return keep_alive

    def _decide(self, req: Request, op: Op) -> tuple[Fault | None, float]:
        canonical = _canonical(req)
        with self._lock:
            n = self._seen[canonical]
            self._seen[canonical] += 1
            paused = self._paused > 0
        digest = hashlib.sha256(f"{self.seed}|{canonical}|{n}".encode()).digest()
        fault, delay = (None, 0.0) if paused else self.plan.draw(
            op, random.Random(int.from_bytes(digest[:8], "big")))
        scripted = None if paused or self.script is None else self.script(req, op, n)
        if scripted is Fault.LATENCY:
            delay = max(delay, self.plan.latency_s[1])
        elif scripted is not None:
            fault = scripted
        with self._lock:
            st = self.stats
            st.requests[op] += 1
            inv_id = req.headers.get("amz-sdk-invocation-id")
            sdk = _sdk_request(req.headers.get("amz-sdk-request", ""))
            if inv_id:
                client = "aiobotocore" if "aiobotocore" in req.headers.get("user-agent", "") \
                    else "botocore"
                inv = st.invocations.setdefault(inv_id, Invocation(op, client, req.method))
                inv.attempts[sdk.get("attempt", 1)] += 1
            else:
                st.untracked[op] += 1
            if "max" in sdk:
                st.max_declared[sdk["max"]] += 1
            if fault is not None:
                st.injected[(op, fault)] += 1
                st.log.append((str(op), str(fault), req.method, req.target))
            if delay:
                st.injected[(op, Fault.LATENCY)] += 1
        return fault, delay


# -- HTTP/1.1 framing (bytes are relayed as they are) -------------------------
def _read_head(src: BinaryIO) -> bytes | None:
    """Raw bytes of a message head up to (excluding) the blank line; None at EOF."""
    lines = []
    while True:
        line = src.readline(_MAX_LINE)
        if not line:
            if lines:
                raise _Dropped("connection closed inside a message head")
            return None
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue  # tolerate a stray CRLF between keep-alive requests
            return b"".join(lines) + b"\r\n"
        lines.append(line)


def _parse_headers(lines: list[bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in lines:
        if b":" not in raw:
            continue
        name, _, value = raw.decode("latin-1").partition(":")
        out[name.strip().lower()] = value.strip()
    return out


def _read_response_head(src: BinaryIO) -> tuple[int, bytes, dict[str, str]]:
    """Status, raw head (with its blank line) and headers, skipping 1xx interim replies."""
    while True:
        head = _read_head(src)
        if head is None:
            raise _Dropped("upstream closed without a response")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        if 100 <= status < 200:
            continue
        return status, head, _parse_headers(lines[1:])


def _copy_exact(src: BinaryIO, n: int, write: Callable[[bytes], None]) -> None:
    while n > 0:
        chunk = src.read(min(n, _CHUNK))
        if not chunk:
            raise _Dropped("connection closed inside a body")
        write(chunk)
        n -= len(chunk)


def _relay_body(src: BinaryIO, headers: dict[str, str], write: Callable[[bytes], None],
                *, until_eof: bool = False) -> bool:
    """Relay one body unchanged; True if it was delimited by the connection closing."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            line = src.readline(_MAX_LINE)
            if not line:
                raise _Dropped("connection closed inside a chunked body")
            write(line)
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = src.readline(_MAX_LINE)
                    if not trailer:
                        raise _Dropped("connection closed inside chunk trailers")
                    write(trailer)
                    if trailer in (b"\r\n", b"\n"):
                        return False
            _copy_exact(src, size + 2, write)
    if "content-length" in headers:
        _copy_exact(src, int(headers["content-length"]), write)
        return False
    if until_eof:
        while chunk := src.read1(_CHUNK):  # type: ignore[attr-defined]
            write(chunk)
        return True
    return False


def _relay_response_body(src: BinaryIO, method: str, status: int, headers: dict[str, str],
                         write: Callable[[bytes], None]) -> bool:
    if method == "HEAD" or status in (204, 304):
        return False
    return _relay_body(src, headers, write, until_eof=True)


def _discard(_: bytes) -> None:
    return None


def _hang_up(conn: socket.socket) -> None:
    """Close without a response, as a crashed front end or a cut network would."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


def _sdk_request(value: str) -> dict[str, int]:
    """``attempt=2; max=4`` -> {"attempt": 2, "max": 4}."""
    out = {}
    for part in value.split(";"):
        k, _, v = part.strip().partition("=")
        if v.isdigit():
            out[k] = int(v)
    return out


_ERRORS = {
    Fault.ERROR_500: (500, "Internal Server Error", "InternalError",
                      "We encountered an internal error. Please try again."),
    Fault.SLOWDOWN_503: (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
}


def _error_response(req: Request, fault: Fault, keep_alive: bool) -> bytes:
    """A real S3 error: XML body with Code/Message/Resource/RequestId (none for HEAD)."""
    status, reason, code, message = _ERRORS[fault]
    request_id = uuid.uuid4().hex[:16].upper()
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><Resource>{req.path}</Resource>"
            f"<RequestId>{request_id}</RequestId><HostId>fault-proxy</HostId></Error>"
            ).encode()
    if req.method == "HEAD":
        body = b""
    head = (f"HTTP/1.1 {status} {reason}\r\n"
            f"x-amz-request-id: {request_id}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n"
            "Server: AmazonS3\r\n\r\n")
    return head.encode() + body
