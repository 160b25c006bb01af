"""Handing the storage connection's credentials to spark-submit, never on its command line.

Apart from the submit operator because it is the one place a secret leaves Airflow for
the job: how it travels (``job_credentials``: spark-submit's environment, a private file
shipped with ``--files``, or not at all), the refusals of setups that would put it on a
command line or in the Spark conf, and the :class:`SparkSubmitHook` that checks the
command line it builds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any
from typing import cast as typing_cast

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_tpc import TpcError

#: How :class:`StagedSparkSubmitOperator` hands the storage connection's credentials to the
#: job. None of them puts a secret on spark-submit's command line or in the Spark conf.
JOB_CREDENTIALS = ("auto", "file", "env", "none")
#: Names of the credentials files shipped with ``--files`` (the job finds them by name).
CREDENTIALS_FILE_PREFIX = "tpc-credentials-"
#: ``env_vars`` names that look like secrets: refused where the hook turns env_vars into
#: ``--conf`` arguments (YARN, Kubernetes).
_SECRET_NAME = re.compile(r"(?i)secret|passw|token|credential|private.?key|access.?key|session")


class SecretOnCommandLine(TpcError, ValueError):
    """A credential would appear on spark-submit's command line or in its Spark conf."""


def resolve_job_credentials(mode: str, master: str, deploy_mode: str | None) -> str:
    """``file``, ``env`` or ``none``: how credentials reach the job for this master/deploy mode.

    ``auto`` is ``env`` for a ``local[...]`` master (driver and executors are processes of
    spark-submit and inherit its environment; nothing is written to disk) and ``file``
    otherwise. Combinations that cannot keep the secret off the command line and still
    deliver it are refused, never degraded silently.
    """
    mode = str(mode).lower()
    if mode not in JOB_CREDENTIALS:
        raise ValueError(f"job_credentials must be one of {list(JOB_CREDENTIALS)}, not {mode!r}")
    master = str(master or "")
    cluster = deploy_mode == "cluster"
    if mode == "auto":
        mode = "env" if master.startswith("local") else "file"
    if mode == "env" and cluster:
        raise SecretOnCommandLine(
            "job_credentials='env' cannot reach a driver in cluster deploy mode: only the "
            "spark-submit process gets that environment, and passing it on (env_vars) would put "
            "the secret on the command line as --conf. Use job_credentials='file' (YARN), or "
            "'none' with the cluster's own credentials (instance role, IRSA, Kubernetes secrets).")
    if mode == "file" and cluster and master.startswith(("k8s://", "spark://")):
        where = ("Kubernetes would upload it to spark.kubernetes.file.upload.path"
                 if master.startswith("k8s://") else
                 "a standalone cluster does not ship --files to a driver it launches")
        raise SecretOnCommandLine(
            "job_credentials='file' is not supported in cluster deploy mode on "
            f"{master.split(':')[0]} ({where}). Use job_credentials='none' and give driver "
            "and executors their credentials the cluster's way: a Kubernetes secret "
            "(spark.kubernetes.driver.secretKeyRef.AWS_ACCESS_KEY_ID=<secret>:<key>, the same "
            "for AWS_SECRET_ACCESS_KEY and spark.kubernetes.executor.secretKeyRef.*), IRSA or "
            "an instance role; or use client deploy mode.")
    return mode


def refuse_secrets_in_argv(argv: Sequence[str], secrets: Sequence[str], where: str) -> None:
    """Fail closed if any secret value appears in ``argv`` (the message never shows it)."""
    for i, arg in enumerate(argv):
        if any(secret and secret in str(arg) for secret in secrets):
            shown = str(arg).split("=", 1)[0] if "=" in str(arg) else f"argument {i}"
            raise SecretOnCommandLine(
                f"{where}: a credential of the storage connection would appear on the "
                f"spark-submit command line (in {shown!r}), where `ps` shows it to every user. "
                "Remove it from conf/application_args/env_vars; the operator hands the "
                "connection's credentials to the job itself (job_credentials).")


def refuse_secret_env_vars(env_vars: dict[str, Any] | None, master: str, where: str) -> None:
    """On YARN/Kubernetes the hook turns env_vars into ``--conf`` arguments: no secrets there."""
    if not env_vars or not ("yarn" in master or "k8s" in master):
        return
    names = sorted(k for k in env_vars if _SECRET_NAME.search(str(k)))
    if names:
        raise SecretOnCommandLine(
            f"{where}: env_vars {names} look like credentials, and with master "
            f"{master.split(':')[0]!r} SparkSubmitHook passes env_vars as --conf arguments "
            "(visible in `ps` and the Spark UI). Give them through storage_conn_id (handed over "
            "by job_credentials) or the cluster's secret mechanism instead.")


def write_credentials_file(env: dict[str, str]) -> str:
    """A new 0600 file in a new 0700 directory holding ``env`` as JSON; returns its path."""
    directory = tempfile.mkdtemp(prefix="airflow_tpc-cred-")  # mode 0700
    path = os.path.join(directory, f"{CREDENTIALS_FILE_PREFIX}{uuid.uuid4().hex}.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(env, fh)
    return path


def remove_credentials_file(path: str | None) -> None:
    if path:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class SecretSafeSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that puts extra variables in spark-submit's *process* environment
    only (never ``--conf``) and refuses to build a command line holding a secret."""

    _tpc_env: dict[str, str]
    _tpc_secrets: tuple[str, ...]

    @classmethod
    def adopt(cls, hook: SparkSubmitHook, env: dict[str, str], secrets: Sequence[str]
              ) -> SecretSafeSparkSubmitHook:
        # The provider's operator builds its hook with ~35 arguments; re-typing the built
        # instance (this subclass adds no state of its own) follows them in every version.
        hook.__class__ = cls
        hook = typing_cast(cls, hook)
        hook._tpc_env = dict(env)
        hook._tpc_secrets = tuple(s for s in secrets if s)
        return hook

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        refuse_secrets_in_argv(args, self._tpc_secrets, "spark-submit")
        if self._tpc_env:
            # submit() passes self._env to Popen: the process environment, not argv.
            self._env = {**(self._env or {}), **self._tpc_env}
        return args

    def _build_spark_submit_command(self, application: str) -> list[str]:
        # checked before the provider logs the command line
        refuse_secrets_in_argv([application, *(self._application_args or [])],
                               self._tpc_secrets, "spark-submit")
        return super()._build_spark_submit_command(application)
