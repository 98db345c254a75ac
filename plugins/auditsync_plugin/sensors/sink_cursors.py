"""Wait until every sink's cursor has passed the end of the run's data interval.

Deferrable by default (the wait happens in the triggerer, see ``triggers/sink_cursors.py``); with
``deferrable=False`` it is an ordinary sensor (use ``mode="reschedule"``), re-reading the heads
at each poke. Either way a timeout fails the task with the lagging consumers and topics named.

A deferrable one pokes in its task for up to ``settle_s`` (10 s) before it defers: the sinks
are usually a moment behind the heads, and a deferral then costs more than the wait (the task's
process ends, the triggerer polls, the scheduler queues the task again, a new process parses
the DAG: 10 s on the 2-core machine). It also keeps clear of Airflow 3.3's race for a trigger
that fires at once (apache/airflow#71580, #72716): the executor's success for the deferring
attempt, processed after the resumed attempt is running, fails it and the task is retried.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from watch_service.storage import Storage, StorageError

from ..hooks.landing_store import aws_conn_id_setting, landing_storage
from ..hooks.watch_service import DEFAULT_CONN_ID, WatchServiceHook
from ..sink_cursors import decide, read_positions, split_consumers


class SinkCursorSensor(BaseSensorOperator):
    """``landing``: the landing zone root (a path, ``file://…`` or ``s3://bucket/prefix``);
    ``consumers``: comma-separated names, empty = every consumer with a ``state.json``;
    ``aws_conn_id``: the ``aws`` connection of an S3 landing (default: the
    ``AUDITSYNC_AWS_CONN_ID`` setting, else the ``AWS_*`` variables)."""

    template_fields: Sequence[str] = ("landing", "consumers", "aws_conn_id")
    ui_color = "#e8f4ff"

    def __init__(
        self,
        *,
        landing: str,
        consumers: str = "",
        watch_conn_id: str = DEFAULT_CONN_ID,
        aws_conn_id: str | None = None,
        deferrable: bool = True,
        poll_s: float = 2.0,
        settle_s: float = 10.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", 30 * 60)
        kwargs.setdefault("poke_interval", poll_s)
        super().__init__(**kwargs)
        self.landing = landing
        self.consumers = consumers
        self.watch_conn_id = watch_conn_id
        self.aws_conn_id = aws_conn_id
        self.deferrable = deferrable
        self.poll_s = poll_s
        self.settle_s = settle_s
        self._last_reason = ""

    def _interval_end_s(self, context) -> float:
        end = context.get("data_interval_end") or context["logical_date"]
        return end.timestamp()

    def _aws_conn_id(self) -> str | None:
        return self.aws_conn_id or aws_conn_id_setting()

    def _landing(self) -> Storage:
        """The landing zone; a location it cannot name fails the task (no retry helps)."""
        try:
            return landing_storage(self.landing, self._aws_conn_id())
        except StorageError as exc:
            raise AirflowFailException(f"landing: {exc}") from None

    def poke(self, context) -> bool:
        end_s = self._interval_end_s(context)
        now = time.time()
        heads = WatchServiceHook(self.watch_conn_id).get_heads() if now >= end_s else None
        positions, missing = read_positions(self._landing(), split_consumers(self.consumers))
        decision = decide(now, end_s, positions, missing, heads)
        self._last_reason = decision.reason
        self.log.info("%s", decision.reason)
        return decision.ready

    def execute(self, context) -> None:
        if not self.deferrable:
            super().execute(context)
            return
        settled_by = time.monotonic() + min(self.settle_s, self.timeout)
        while True:
            if self.poke(context):
                return
            if time.monotonic() + self.poll_s >= settled_by:
                break
            time.sleep(self.poll_s)
        from ..triggers.sink_cursors import SinkCursorTrigger

        self.defer(
            trigger=SinkCursorTrigger(
                landing=str(self.landing),
                consumers=split_consumers(self.consumers),
                interval_end_s=self._interval_end_s(context),
                deadline_s=time.time() + self.timeout,
                watch_conn_id=self.watch_conn_id,
                poll_s=self.poll_s,
                aws_conn_id=self._aws_conn_id(),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + 120),
        )

    def execute_complete(self, context, event: dict[str, Any]) -> None:
        if event.get("status") != "ready":
            raise AirflowFailException(
                f"the sinks did not pass the end of the data interval within "
                f"{self.timeout:.0f}s: {event.get('reason')}"
            )
        self.log.info("%s", event.get("reason"))
