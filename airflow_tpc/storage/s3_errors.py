"""What an S3 error means: its code, its HTTP status, a refused condition, a cut body.

Apart from :mod:`airflow_tpc.storage.s3` because the answers of boto3 and of s3fs
(which keeps boto3's error as ``__cause__``) are read the same way by every
operation there.
"""

from __future__ import annotations

from typing import Any

#: A response body cut mid-stream (aiohttp under s3fs; botocore's StreamingBody).
#: The SDK's retries end when the response headers arrive, so reads retry these.
_CUT_BODY_ERRORS = ("ClientPayloadError", "ResponseStreamingError", "IncompleteReadError")


def _is_cut_body(exc: BaseException) -> bool:
    # Only the error itself or what s3fs translated it from: a connection error
    # *before* the response also has urllib3 errors in its __context__.
    return any(type(e).__name__ in _CUT_BODY_ERRORS for e in (exc, exc.__cause__) if e)


#: What S3 (and stores that speak it) answer to a request the caller may not make.
DENIED_CODES = ("AccessDenied", "403", "Forbidden", "AllAccessDisabled")


def _error_response(exc: Exception) -> dict[str, Any] | None:
    """The S3 error response behind ``exc``: s3fs turns a ClientError into OSError & co.
    and keeps it as the ``__cause__``."""
    for err in (exc, exc.__cause__):
        response = getattr(err, "response", None)
        if response:
            return response  # type: ignore[no-any-return]
    return None


def _client_error_code(exc: Exception) -> str:
    response = _error_response(exc)
    if response is None:
        return type(exc).__name__
    return str(response.get("Error", {}).get("Code", type(exc).__name__))


def _http_status(exc: Exception) -> int | None:
    """The HTTP status of a refused request (a GET's error names its code, e.g.
    ``AccessDenied``; a HEAD's, which has no body, only its status)."""
    status = (_error_response(exc) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status else None


def _precondition_failed(exc: BaseException) -> bool:
    """The store refused a conditional request (412): the error itself, what s3fs
    translated it from, or the one s3transfer wrapped in ``S3CopyFailedError``."""
    if _client_error_code(exc).startswith("PreconditionFailed"):  # type: ignore[arg-type]
        return True
    return any("PreconditionFailed" in str(e) or "(412)" in str(e)
               for e in (exc, exc.__cause__, exc.__context__) if e is not None)
