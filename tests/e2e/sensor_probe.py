"""Run by ``test_credentials`` in a child process (whose environment holds no AWS keys): the
sink-cursor sensor's poke and its trigger's first event over an ``s3://`` landing, printed as
one JSON line. ``argv``: landing, consumers."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time


async def _first_event(trigger) -> dict:
    async for event in trigger.run():
        return dict(event.payload)
    return {}


def main(landing: str, consumers: str) -> None:
    from auditsync_plugin.sensors.sink_cursors import SinkCursorSensor
    from auditsync_plugin.sink_cursors import read_positions
    from auditsync_plugin.triggers.sink_cursors import SinkCursorTrigger

    sensor = SinkCursorSensor(task_id="wait_for_sinks", landing=landing, consumers=consumers)
    end = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    ready = sensor.poke({"data_interval_end": end})
    trigger = SinkCursorTrigger(
        landing,
        consumers.split(","),
        end.timestamp(),
        time.time() + 30,
        "auditsync_watch",
        poll_s=0.05,
        aws_conn_id=sensor._aws_conn_id(),
    )
    event = asyncio.run(asyncio.wait_for(_first_event(trigger), 30))
    found, _ = read_positions(sensor._landing(), consumers.split(","))
    cursors = {p.consumer: p.cursors for p in found}
    print(json.dumps({"poke": ready, "trigger": event.get("status"), "cursors": cursors}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
