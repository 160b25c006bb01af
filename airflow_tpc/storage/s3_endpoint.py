"""What of an S3 endpoint URL may be accepted, and what may be shown.

An endpoint travels in operator arguments, XComs, the Spark conf and ``repr``, so
its checks are asked by the Airflow layer and the job's payload as well as by
:class:`~airflow_tpc.storage.s3.S3Storage`; apart from it, they need neither
boto3 nor s3fs.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from ..errors import TpcError

#: What of any store's options may be shown: S3's region, Azure's account name, and an
#: endpoint (redacted below); never a key, secret, token or connection string.
_PUBLIC_OPTION_KEYS = ("endpoint_url", "region_name", "account_name")


class UnsafeEndpointError(TpcError, ValueError):
    """An endpoint URL that would carry a secret (user info, query string, fragment)."""


def check_endpoint_url(url: Any, where: str = "endpoint_url") -> str:
    """The endpoint URL, or one clear error if it could carry a secret.

    An endpoint travels in operator arguments, XComs, trigger kwargs, the Spark conf
    and ``repr``, so it may hold only ``http(s)://host[:port][/path]``: a
    ``user:secret@`` part, a query string (a presigned signature, a token) or a
    fragment is refused.  The message never repeats the URL (it is the secret).
    Credentials belong in a connection's login/password or the job's environment.
    """
    if not isinstance(url, str) or not url:
        raise UnsafeEndpointError(f"{where} must be a non-empty string URL")
    problems = []
    if "@" in url:
        problems.append("a user name or password ('user:secret@')")
    if "?" in url:
        problems.append("a query string")
    if "#" in url:
        problems.append("a fragment")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        problems.append("whitespace or control characters")
    if not problems:
        try:
            parts = urllib.parse.urlsplit(url)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
            if ok:
                parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            ok = False
        if not ok:
            problems.append("no http:// or https:// scheme and host")
    if problems:
        raise UnsafeEndpointError(
            f"{where} is refused: it carries {' and '.join(problems)}. An endpoint may only be "
            "http(s)://host[:port][/path]; put credentials in the storage connection "
            "(login = access key id, password = secret) or the job's environment, never in "
            "the URL (the URL is shown in the UI, XComs, the Spark conf and logs).")
    return url


def redact_endpoint_url(url: Any) -> str | None:
    """What may be *shown* of an endpoint: scheme, host, port and path; never user info or query.

    For output paths (``repr``, public options) as a second line of defence: inputs are
    refused by :func:`check_endpoint_url` already.
    """
    if url is None:
        return None
    try:
        return check_endpoint_url(url)
    except UnsafeEndpointError:
        pass
    try:
        parts = urllib.parse.urlsplit(str(url))
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        path = parts.path if "@" not in parts.path else ""
    except ValueError:
        return "<redacted endpoint>"
    if parts.scheme not in ("http", "https") or not host:
        return "<redacted endpoint>"
    return f"{parts.scheme}://{host}{port}{path}"


def public_s3_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """The options that may be shown or travel: endpoint (redacted), region, account name."""
    out = {k: options[k] for k in _PUBLIC_OPTION_KEYS
           if options and options.get(k) is not None}
    if "endpoint_url" in out:
        out["endpoint_url"] = redact_endpoint_url(out["endpoint_url"])
    return out
