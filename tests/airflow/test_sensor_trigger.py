"""The deferrable half of the sink-cursor sensor against the real watch service: it reads the
heads once, then waits on the sink's state.json; past its deadline it reports who lags."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from airflow.sdk.exceptions import TaskDeferred

from auditsync_plugin.hooks.watch_service import WatchServiceHook
from auditsync_plugin.sensors.sink_cursors import SinkCursorSensor
from auditsync_plugin.triggers.sink_cursors import SinkCursorTrigger

from ..support import ON_S3, unique
from .conftest import http_json

pytestmark = [pytest.mark.airflow, pytest.mark.service]


@pytest.fixture
def watch_conn(watch_service, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_AUDITSYNC_WATCH",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": watch_service.port}),
    )
    return watch_service


@pytest.fixture
def topic(watch_conn) -> tuple[str, int]:
    name = unique("sensor")
    http_json("PUT", f"{watch_conn.url}/v0/topics/{name}", {})
    http_json(
        "POST",
        f"{watch_conn.url}/v0/topics/{name}/records",
        {"records": [{"data": i} for i in range(5)]},
    )
    return name, 5


def _state(tmp_path, consumer: str, topic: str, cursor: int) -> None:
    (tmp_path / consumer).mkdir(exist_ok=True)
    (tmp_path / consumer / "state.json").write_text(
        json.dumps({"topics": [topic], "cursors": {topic: cursor}})
    )


async def _first_event(trigger: SinkCursorTrigger):
    async for event in trigger.run():
        return event.payload


def test_the_hook_reads_heads_from_the_service(topic):
    name, head = topic
    assert WatchServiceHook().get_heads()[name] == head


def test_trigger_fires_when_the_sink_has_the_heads(topic, tmp_path):
    name, head = topic
    _state(tmp_path, "c1", name, head)
    trigger = SinkCursorTrigger(
        str(tmp_path), ["c1"], time.time() - 60, time.time() + 30, "auditsync_watch", poll_s=0.05
    )
    payload = asyncio.run(asyncio.wait_for(_first_event(trigger), 30))
    assert payload["status"] == "ready"


@ON_S3
def test_trigger_reads_an_s3_landing_through_its_aws_connection(
    topic, landing_location, object_store, monkeypatch
):
    name, head = topic
    cfg = object_store.config
    conn = {"conn_type": "aws", "login": cfg.access_key, "password": cfg.secret_key}
    conn["extra"] = {"endpoint_url": cfg.endpoint}
    monkeypatch.setenv("AIRFLOW_CONN_S3_LANDING", json.dumps(conn))
    state = {"topics": [name], "cursors": {name: head}}
    landing_location.write_bytes("c1/state.json", json.dumps(state).encode())
    sensor = SinkCursorSensor(
        task_id="s", landing=landing_location.uri(), aws_conn_id="s3_landing", poll_s=0.05
    )
    assert sensor.poke({"data_interval_end": None, "logical_date": _past()})
    trigger = SinkCursorTrigger(
        landing_location.uri(),
        ["c1"],
        time.time() - 60,
        time.time() + 30,
        "auditsync_watch",
        poll_s=0.05,
        aws_conn_id="s3_landing",
    )
    payload = asyncio.run(asyncio.wait_for(_first_event(trigger), 30))
    assert payload == {
        "status": "ready",
        "reason": "every sink (c1) has reached the heads read after the interval",
    }


def _past(minutes: int = 1):
    import datetime

    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=minutes)


def test_trigger_times_out_naming_the_lagging_topic(topic, tmp_path):
    name, head = topic
    _state(tmp_path, "c1", name, head - 2)
    trigger = SinkCursorTrigger(
        str(tmp_path), ["c1"], time.time() - 60, time.time() + 0.3, "auditsync_watch", poll_s=0.05
    )
    payload = asyncio.run(asyncio.wait_for(_first_event(trigger), 30))
    assert payload["status"] == "timeout"
    assert f"c1/{name} cursor {head - 2} < head {head} (2 behind)" in payload["reason"]
    classpath, kwargs = trigger.serialize()
    assert classpath == "auditsync_plugin.triggers.sink_cursors.SinkCursorTrigger"
    assert SinkCursorTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_the_sensor_fails_loudly_with_the_triggers_reason():
    from airflow.sdk.exceptions import AirflowFailException

    sensor = SinkCursorSensor(task_id="s", landing="/l", timeout=60)
    with pytest.raises(AirflowFailException, match=r"within 60s: c1/a cursor 1 < head 3"):
        sensor.execute_complete({}, {"status": "timeout", "reason": "c1/a cursor 1 < head 3"})
    sensor.execute_complete({}, {"status": "ready", "reason": "ok"})
    typo = SinkCursorSensor(task_id="t", landing="s3:/bars/landing", timeout=60)
    with pytest.raises(AirflowFailException, match=r"^landing: unsupported location 's3:/bars"):
        typo.poke({"data_interval_end": _past(minutes=-60)})  # no heads asked for yet


class _Observed(SinkCursorSensor):
    """The sensor, its pokes' reasons kept and ``behind`` set once one found a sink behind."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.reasons: list[str] = []
        self.behind = threading.Event()

    def poke(self, context) -> bool:
        ready = super().poke(context)
        self.reasons.append(self._last_reason)
        if not ready:
            self.behind.set()
        return ready


def test_a_sink_a_moment_behind_is_waited_for_in_the_task(topic, tmp_path):
    """The deferrable sensor pokes in its task for up to ``settle_s`` before it defers: a sink
    that catches up meanwhile ends the task there, with no deferral (no TaskDeferred)."""
    name, head = topic
    _state(tmp_path, "c1", name, head - 2)
    sensor = _Observed(task_id="s", landing=str(tmp_path), poll_s=0.05, settle_s=60)
    catching_up = threading.Thread(
        target=lambda: sensor.behind.wait(30) and _state(tmp_path, "c1", name, head)
    )
    catching_up.start()
    try:
        sensor.execute({"data_interval_end": None, "logical_date": _past()})
    finally:
        catching_up.join()
    behind = f"c1/{name} cursor {head - 2} < head {head} (2 behind)"
    assert sensor.reasons[0] == f"sink cursors behind the service heads: {behind}"
    assert sensor.reasons[-1] == "every sink (c1) has reached the heads read after the interval"


def test_a_sink_still_behind_after_settle_s_defers_to_the_trigger(topic, tmp_path):
    """Still behind when ``settle_s`` is up: the task defers to ``SinkCursorTrigger`` (the
    wait goes on in the triggerer), having poked more than once."""
    name, head = topic
    _state(tmp_path, "c1", name, head - 2)
    sensor = _Observed(task_id="s", landing=str(tmp_path), poll_s=0.05, settle_s=0.3)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"data_interval_end": None, "logical_date": _past()})
    assert len(sensor.reasons) >= 2
    assert all(f"c1/{name} cursor {head - 2} < head {head} (2 behind)" in r for r in sensor.reasons)
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "auditsync_plugin.triggers.sink_cursors.SinkCursorTrigger"
    assert kwargs["consumers"] == [] and kwargs["landing"] == str(tmp_path)
