"""Where a job's S3 credentials come from: the file shipped with ``--files``, else
the job's environment (never the payload, which the Spark UI shows).

Apart from :mod:`.context` because the read-committed readers (:mod:`.committed`)
need them too, without a transaction.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import TpcError

#: The variables a credentials file may hold (the same names as the environment's).
_CREDENTIAL_VARS = {"AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret",
                    "AWS_SESSION_TOKEN": "token"}
_FILE_CREDENTIALS: dict[str, dict[str, Any]] = {}


def _credentials_file_candidates(name: str) -> list[str]:
    """Where a file shipped with ``--files`` lands: SparkFiles' root (local, standalone,
    Kubernetes client; executors and Python workers too), else the working directory
    (YARN localizes ``--files`` into each container's working directory)."""
    out = []
    try:
        from pyspark import SparkFiles

        out.append(os.path.join(SparkFiles.getRootDirectory(), name))
    except Exception:  # noqa: BLE001 - no pyspark, or no SparkContext in this process
        pass
    out.append(os.path.join(os.getcwd(), name))
    return out


def _credentials_from_file(name: str, names: dict[str, str] | None = None) -> dict[str, Any]:
    """S3 options (or, given the store's ``credential_env`` as ``names``, that store's)
    from the credentials file the payload names (cached per process).

    A named file that cannot be found or read is an error, never a silent fall back to
    another identity.  Messages name the file, never its content.
    """
    if names is not None and names != _CREDENTIAL_VARS:
        return _other_store_file(name, names)
    for path in _credentials_file_candidates(name):
        if path in _FILE_CREDENTIALS:
            return _FILE_CREDENTIALS[path]
        doc = _json_file(path, name)
        if doc is _ABSENT:
            continue
        if not isinstance(doc, dict) or not all(
                isinstance(doc.get(k), str) and doc[k]
                for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")):
            raise TpcError(f"the credentials file {name} must be a JSON object with "
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        opts = {opt: doc[var] for var, opt in _CREDENTIAL_VARS.items()
                if isinstance(doc.get(var), str) and doc[var]}
        _FILE_CREDENTIALS[path] = opts
        return opts
    raise TpcError(
        f"the payload names the credentials file {name}, but it is neither in SparkFiles' "
        "directory nor in the working directory: it must be shipped with spark-submit "
        "--files (the submit operator does this; a standalone cluster in cluster deploy mode "
        "cannot).")


_ABSENT = object()


def _json_file(path: str, name: str) -> Any:
    """The JSON in one candidate path of the shipped file ``name``, or ``_ABSENT`` when
    no file is there; a file that cannot be read or parsed is an error (naming the file,
    never its content)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return _ABSENT
    except (OSError, ValueError):
        raise TpcError(f"the credentials file {name} shipped with the job cannot be read "
                       "or is not JSON") from None


def _other_store_file(name: str, names: dict[str, str]) -> dict[str, Any]:
    """A store other than S3 (Azure): the file holds some of ``names``, each a string."""
    for path in _credentials_file_candidates(name):
        doc = _json_file(path, name)
        if doc is _ABSENT:
            continue
        opts = {opt: doc[var] for var, opt in names.items()
                if isinstance(doc, dict) and isinstance(doc.get(var), str) and doc[var]}
        if not opts:
            raise TpcError(f"the credentials file {name} must be a JSON object with some of "
                           f"{sorted(names)}")
        return opts
    raise TpcError(f"the payload names the credentials file {name}, but it is neither in "
                   "SparkFiles' directory nor in the working directory: it must be shipped "
                   "with spark-submit --files")


def _credentials_from_env(names: dict[str, str] | None = None) -> dict[str, Any]:
    """S3 options (or, given ``names``, another store's) that come from the job's
    environment, never from the payload."""
    if names is not None and names != _CREDENTIAL_VARS:
        return {opt: os.environ[var] for var, opt in names.items() if os.environ.get(var)}
    opts: dict[str, Any] = {}
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        opts["key"] = os.environ["AWS_ACCESS_KEY_ID"]
        opts["secret"] = os.environ["AWS_SECRET_ACCESS_KEY"]
        if os.environ.get("AWS_SESSION_TOKEN"):
            opts["token"] = os.environ["AWS_SESSION_TOKEN"]
    return opts  # empty: s3fs/botocore fall back to their default chain (profiles, IAM role)
