"""The payload: the JSON document the submit operator hands a Spark job, and how the
job finds it (Spark conf first, then the environment).

Apart from :mod:`.context` (the job's transaction, built from it) so that what travels
in the Spark conf, and the checks that keep secrets out of it, read in one place; a
group's payload (:mod:`.group_context`) is found the same way (:func:`read_payload`).
Credentials never travel: :mod:`.credentials`.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from ..core.transaction import DeliveryGuarantee, Transaction
from ..errors import TpcError
from ..storage.s3_endpoint import public_s3_options

log = logging.getLogger("airflow_tpc.spark")

#: Spark conf key carrying the payload (set with ``--conf`` by the submit operator).
CONF_KEY = "spark.airflow_tpc.txn"
#: Environment variable carrying the payload when the conf key is absent.
ENV_VAR = "AIRFLOW_TPC_TXN"
#: Storage options allowed to travel in the payload (everything else may be secret).
PUBLIC_STORAGE_KEYS = ("endpoint_url", "region_name", "account_name")
#: A credentials file is named, never a path: a plain file name shipped with --files.
_CREDENTIALS_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def _as_guarantee(value: Any) -> DeliveryGuarantee:
    try:
        return DeliveryGuarantee(str(value).upper())
    except ValueError:
        raise TpcError(f"unknown delivery guarantee {value!r}; use one of "
                       f"{[g.value for g in DeliveryGuarantee]}") from None


def public_storage_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """The part of ``options`` that may be shown in a UI: endpoint and region only.

    An endpoint with ``user:secret@`` or a query string loses them here (it is refused
    where it is accepted; this is the second line of defence).
    """
    return public_s3_options(options)


def build_payload(txn: Transaction, *, guarantee: DeliveryGuarantee | str = "EXACTLY_ONCE",
                  promotion: str = "move",
                  storage_options: dict[str, Any] | None = None,
                  credentials_file: str | None = None, table: str | None = None,
                  epoch_column: bool = True) -> str:
    """The JSON the submit operator puts in ``spark.airflow_tpc.txn`` (or ``AIRFLOW_TPC_TXN``).

    Secrets in ``storage_options`` are dropped here on purpose: the Spark conf is
    shown in the Spark UI and in logs.  ``credentials_file`` is the *name* of a file
    shipped with ``--files`` holding ``AWS_*`` credentials as JSON (never its content).
    ``epoch_column``: whether a table's files carry the ``epoch`` column (the epoch
    layout); False for a table whose epoch is a ``replace_where`` or an append.
    """
    doc = {**txn.to_dict(), "guarantee": _as_guarantee(guarantee).value,
           "promotion": promotion, "storage": public_storage_options(storage_options)}
    if table:
        doc["table"] = check_uri_field(table, "payload", "table")
        if not epoch_column:
            doc["epoch_column"] = False
    if credentials_file:
        doc["credentials_file"] = _check_credentials_file_name(credentials_file, "payload")
    return json.dumps(doc, sort_keys=True)


def payload_object(payload: str | dict[str, Any], where: str) -> dict[str, Any]:
    """The JSON object a payload is (given as text, or already parsed), as a new dict;
    one clear error for text that is not JSON or JSON that is not an object."""
    if isinstance(payload, str):
        try:
            doc = json.loads(payload)
        except ValueError as exc:
            raise TpcError(f"{where} is not valid JSON: {exc}") from None
    else:
        doc = payload
    if not isinstance(doc, dict):
        raise TpcError(f"{where} must be a JSON object")
    return dict(doc)


#: A payload's URI fields: what each must be, and whether it must be ``scheme://``.
URI_FIELDS: dict[str, tuple[str, bool]] = {
    "table": ("a table URI such as iceberg://<catalog>/<namespace>.<table> (no user part, "
              "query or fragment)", True),
    "group": ("the group's folder URI (no query or fragment)", False),
}


def check_uri_field(value: Any, where: str, key: str) -> str:
    """A URI field of a payload (``table``: a table target's, for the job to know it
    writes a table; ``group``: the group's folder, as ``Group.uri`` spells it): a string
    with no query, fragment, newline or NUL, and no user part (credentials never travel
    in a payload); a ``table`` is a ``scheme://`` URI."""
    expected, scheme = URI_FIELDS[key]
    if not isinstance(value, str) or not value or (scheme and "://" not in value) \
            or any(c in value for c in "?#\n\x00"):
        raise TpcError(f"{where}: '{key}' must be {expected}")
    if "://" in value and "@" in value.split("://", 1)[1].split("/", 1)[0]:
        raise TpcError(f"{where}: '{key}' must not carry a user part")
    return value


def _check_credentials_file_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not _CREDENTIALS_FILE_NAME.fullmatch(name):
        raise TpcError(f"{where}: 'credentials_file' must be a plain file name (letters, digits, "
                       "'.', '_', '-'), the name of a file shipped with --files")
    return name


def spark_conf_for(txn: Transaction, **kwargs: Any) -> dict[str, str]:
    """``{CONF_KEY: payload}``: ready for SparkSubmitOperator(conf=...)."""
    return {CONF_KEY: build_payload(txn, **kwargs)}


def read_payload(spark: Any = None, conf_key: str = CONF_KEY,
                 env_var: str = ENV_VAR) -> tuple[str | None, str]:
    """(payload, where it came from): the Spark conf key first, then the environment
    (a group's payload has its own key and variable)."""
    conf_value = None
    if spark is not None:
        try:
            conf_value = spark.conf.get(conf_key, None)
        except Exception:  # noqa: BLE001 - e.g. a Connect session without that conf
            conf_value = None
    env_value = os.environ.get(env_var)
    if conf_value:
        if env_value and env_value != conf_value:
            log.warning("both %s and $%s are set and differ; using the Spark conf", conf_key,
                        env_var)
        return conf_value, f"Spark conf {conf_key}"
    if env_value:
        return env_value, f"environment variable {env_var}"
    return None, ""
