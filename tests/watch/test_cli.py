"""``auditsync watch`` as a user runs it: a subprocess printing one line per frame, which
reconnects with ``Last-Event-ID`` after the connection drops (cut by a TCP relay between it
and the real service, which also shows the exact request headers the client sent)."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from tests.support import ROOT, unique, wait_for
from watch_service.sink.watch_command import build_parser, format_frame, positions

from .relay import CuttableRelay
from .wire import cursor_id

pytestmark = [pytest.mark.e2e, pytest.mark.service]


# ``auditsync watch ARGS`` is ``watch_service.sink.watch_command.main(ARGS)``; the tests run the
# module itself until the CLI passes leading --flags through (test_auditsync_watch_delegates).
COMMAND = [sys.executable, "-m", "watch_service.sink.watch_command"]


async def run_cli(*args: str, command: list[str] = COMMAND) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command, *args, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def finish(
    proc: asyncio.subprocess.Process, timeout: float = 30
) -> tuple[int, list[str], str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode().splitlines(), err.decode()


def per_topic(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        out.setdefault(line.split()[1], []).append(line)
    return out


@pytest.mark.unit
def test_frame_lines_and_flags():
    assert (
        format_frame("record", {"topic": "a", "records": [{"$seq": 4}, {"$seq": 5}]})
        == "record a 4 5"
    )
    assert format_frame("caught-up", {"topic": "a", "head_seq": 5}) == "caught-up a head=5"
    assert (
        format_frame("tombstone", {"topic": "a", "reason": "cap", "gap_from": 2, "gap_to": 9})
        == "tombstone a cap 2-9"
    )
    assert (
        format_frame(
            "rewound",
            {"topic": "a", "reason": "source_rewound", "gap_from": 4, "gap_to": 9, "head_seq": 3},
        )
        == "rewound a source_rewound 4-9"
    )
    assert format_frame("topic-deleted", {"topic": "a", "head_seq": 3}) == "topic-deleted a head=3"
    assert (
        format_frame("error", {"code": "unavailable", "message": "bye"}) == "error unavailable bye"
    )
    assert positions(cursor_id({"a": 3, "b": 0})) == {"a": 3, "b": 0}
    assert positions("garbage!") is None and positions(None) is None
    args = build_parser().parse_args(["--topics", "a,b", "--tail", "--max-frames", "3"])
    assert (args.topics, args.tail, args.max_frames, args.url) == (
        "a,b",
        True,
        3,
        "http://127.0.0.1:8400",
    )


async def test_auditsync_watch_delegates(api, service):
    topic = await api.topic()
    code, lines, err = await finish(
        await run_cli(
            "--url",
            service.url,
            "--topics",
            topic,
            "--max-frames",
            "1",
            "--timeout",
            "20",
            command=[sys.executable, "-m", "watch_service.cli", "watch"],
        )
    )
    assert (code, lines) == (0, [f"caught-up {topic} head=0"]), err


async def test_prints_one_line_per_frame(api, service):
    a, b = await api.topic(), await api.topic()
    await api.append(a, 1, 2)
    await api.append(b, 1)
    code, lines, err = await finish(
        await run_cli(
            "--url", service.url, "--topics", f"{a},{b}", "--max-frames", "4", "--timeout", "20"
        )
    )
    assert code == 0, err
    assert per_topic(lines) == {
        a: [f"record {a} 1 2", f"caught-up {a} head=2"],
        b: [f"record {b} 1", f"caught-up {b} head=1"],
    }


async def test_tail_timeout_and_refusals(api, service):
    topic = await api.topic()
    await api.append(topic, 1)
    code, lines, err = await finish(
        await run_cli(
            "--url", service.url, "--topics", topic, "--tail", "--max-frames", "2", "--timeout", "2"
        )
    )
    assert (code, lines) == (1, [f"caught-up {topic} head=1"]), err
    code, lines, err = await finish(
        await run_cli("--url", service.url, "--topics", unique("w.missing"), "--timeout", "20")
    )
    assert code == 2 and "topic_not_found" in err


async def test_reconnects_with_last_event_id_after_a_drop(api, service):
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    relay = await CuttableRelay(service.port).start()
    proc = await run_cli(
        "--url",
        f"http://127.0.0.1:{relay.port}",
        "--topics",
        topic,
        "--json",
        "--heartbeat-ms",
        "1000",
        "--max-frames",
        "4",
        "--timeout",
        "30",
    )
    try:

        async def line() -> dict:
            return json.loads(await asyncio.wait_for(proc.stdout.readline(), 15))

        assert [r["$seq"] for r in (await line())["data"]["records"]] == [1, 2, 3]
        caught_up = await line()
        assert caught_up["event"] == "caught-up" and caught_up["id"] == cursor_id({topic: 3})
        assert "last-event-id" not in relay.stream_requests()[0]

        relay.cut()
        await wait_for(
            lambda: len(relay.stream_requests()) == 2, timeout=15, what="the client to reconnect"
        )
        assert relay.stream_requests()[1]["last-event-id"] == caught_up["id"]
        assert (await line())["event"] == "caught-up"  # the new stream's backlog → live
        await api.append(topic, 4)
        assert [r["$seq"] for r in (await line())["data"]["records"]] == [4]
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await relay.stop()
