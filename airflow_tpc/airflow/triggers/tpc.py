"""PrecommitTrigger: waits for a pre-commit manifest in the triggerer, holding no worker slot.

Its kwargs are stored in the metadata DB, so they carry only public data: the
transaction (no secrets in it) and the sink arguments as :meth:`SinkArgs.serialize`
gives them (the target, public storage options and the *name* of the credentials
connection, resolved inside the triggerer).  Each poll is the sensor's own question,
:meth:`TpcHook.check_precommit`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_tpc.airflow.hooks.tpc import SinkArgs, TpcHook


class PrecommitTrigger(BaseTrigger):
    """Poll storage until the attempt is pre-committed, fails, or ``deadline`` passes.

    :param txn: the transaction XCom of the submit task.
    :param poll_interval: seconds between looks.
    :param deadline: epoch seconds after which a ``timeout`` event is sent.
    :param sink_args: the sink arguments as :meth:`SinkArgs.serialize` gives them
        (``target``, ``namespace``, ``storage_conn_id``, ...; connections by name only),
        flat among the kwargs as every release stored them.  Only the sensor builds this
        trigger, so they are taken as :class:`SinkArgs` declares them, not repeated here.
    """

    def __init__(self, *, txn: dict[str, Any], poll_interval: float = 10.0,
                 deadline: float | None = None, **sink_args: Any) -> None:
        super().__init__()
        self.txn = txn
        self.sink_args = SinkArgs(**sink_args, where=type(self).__name__)
        self.poll_interval = poll_interval
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "txn": self.txn, **self.sink_args.serialize(),
            "poll_interval": self.poll_interval, "deadline": self.deadline})

    async def _hook(self) -> TpcHook:
        connection = None
        if self.sink_args.storage_conn_id:
            connection = await TpcHook.aget_connection(self.sink_args.storage_conn_id)
        catalog = None
        if self.sink_args.catalog_conn_id:
            catalog = await TpcHook.aget_connection(self.sink_args.catalog_conn_id)
        return self.sink_args.hook(connection=connection, catalog_connection=catalog)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = await self._hook()
        async for event in poll_until(self, lambda: hook.check_precommit(self.txn)):
            yield event


async def poll_until(trigger: Any, check: Callable[[], Any]) -> AsyncIterator[TriggerEvent]:
    """The loop of a pre-commit trigger (a target's or a group's): ask ``check`` (in a
    thread; it does blocking I/O) every ``trigger.poll_interval`` seconds until it is
    no longer "waiting" or ``trigger.deadline`` passes; one event either way."""
    while True:
        try:
            result = await asyncio.to_thread(check)
            status, message = result.status, result.message
        except Exception as exc:  # storage hiccup: report it, the sensor fails clearly
            status, message = "failed", f"could not check the pre-commit: {exc}"
        if status != "waiting":
            yield TriggerEvent({"status": status, "message": message})
            return
        if trigger.deadline is not None and time.time() >= trigger.deadline:
            yield TriggerEvent({"status": "timeout", "message": f"timed out: {message}"})
            return
        trigger.log.info("%s; next look in %.0f s", message, trigger.poll_interval)
        await asyncio.sleep(trigger.poll_interval)
