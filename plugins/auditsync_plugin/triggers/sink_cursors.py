"""The deferrable half of the sink-cursor sensor: waits in the triggerer, not in a worker slot.

It reads the service's heads once, at or after the interval's end, and then only re-reads the
sinks' ``state.json`` (on a local disk or S3) until every cursor reaches those heads: a busy
topic whose head keeps moving cannot keep the run waiting forever. Past ``deadline`` it
reports why it is still waiting, and the sensor fails with that reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..hooks.landing_store import landing_storage
from ..hooks.watch_service import WatchServiceError, WatchServiceHook
from ..sink_cursors import decide, read_positions


class SinkCursorTrigger(BaseTrigger):
    def __init__(
        self,
        landing: str,
        consumers: list[str],
        interval_end_s: float,
        deadline_s: float,
        watch_conn_id: str,
        poll_s: float = 2.0,
        aws_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.landing = landing
        self.consumers = list(consumers)
        self.interval_end_s = float(interval_end_s)
        self.deadline_s = float(deadline_s)
        self.watch_conn_id = watch_conn_id
        self.poll_s = float(poll_s)
        self.aws_conn_id = aws_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "landing": self.landing,
                "consumers": self.consumers,
                "interval_end_s": self.interval_end_s,
                "deadline_s": self.deadline_s,
                "watch_conn_id": self.watch_conn_id,
                "poll_s": self.poll_s,
                "aws_conn_id": self.aws_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = WatchServiceHook(self.watch_conn_id)
        landing = await asyncio.to_thread(landing_storage, self.landing, self.aws_conn_id)
        heads: dict[str, int] | None = None
        service_error = ""
        while True:
            now = time.time()
            if heads is None and now >= self.interval_end_s:
                try:
                    heads = await asyncio.to_thread(hook.get_heads)
                except WatchServiceError as exc:
                    service_error = f" (service: {exc})"
            positions, missing = await asyncio.to_thread(read_positions, landing, self.consumers)
            decision = decide(now, self.interval_end_s, positions, missing, heads)
            if decision.ready:
                yield TriggerEvent({"status": "ready", "reason": decision.reason})
                return
            if now >= self.deadline_s:
                yield TriggerEvent({"status": "timeout", "reason": decision.reason + service_error})
                return
            self.log.info("waiting: %s%s", decision.reason, service_error)
            await asyncio.sleep(self.poll_s)
