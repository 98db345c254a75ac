"""Unit tests for the live set's push: every live sink gets the shared frames, a slice of
``CHECK_EVERY`` sinks a call; a sink that cannot take them leaves the set; a turn of the loop
may come between two slices, and a sink that left during it is not pushed to. No sockets: the
sinks record what they were handed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from watch_service.engine import fanout
from watch_service.engine.fanout import CHECK_EVERY, Flags, Group, LiveSet, LiveSink
from watch_service.protocol.stream_state import SharedFrame

pytestmark = pytest.mark.unit
GROUP: Group = ((False, False, True), 100, 1 << 20, None)


class Item:
    __slots__ = ("node", "seq")

    def __init__(self, seq: int) -> None:
        self.seq, self.node = seq, None


def encoder(flags: Flags):
    return lambda item: f'{{"$seq":{item.seq}}}'


class Sink:
    """A live sink that keeps the frame bodies it was handed, or refuses them."""

    def __init__(self, refuse: bool = False) -> None:
        self.group, self.refuse = GROUP, refuse
        self.got: list[list[bytes | None]] = []

    def wake(self, topic: str) -> None:
        pass

    def left(self, topic: str) -> None:
        pass

    @staticmethod
    def push_each(
        sinks: Sequence[LiveSink],
        topic: str,
        after: int,
        shared: Sequence[SharedFrame],
        upto: int,
        head: int,
    ) -> list[LiveSink]:
        refused: list[LiveSink] = []
        for sink in sinks:
            assert isinstance(sink, Sink)
            if sink.refuse:
                refused.append(sink)
            else:
                sink.got.append([frame.body for frame in shared])
        return refused


async def test_a_push_reaches_every_live_sink_slice_by_slice(monkeypatch):
    monkeypatch.setattr(fanout, "TURN_S", 0.0)  # the loop gets a turn after every slice
    dropped: list[LiveSink] = []
    live = LiveSet(dropped.append)
    sinks = [Sink() for _ in range(2 * CHECK_EVERY + 5)]
    refusing = Sink(refuse=True)
    for sink in [*sinks, refusing]:
        live.join(sink)
    left_meanwhile: list[Sink] = []

    def leave_the_rest() -> None:  # runs in the first turn the push gives the loop
        for sink in sinks:
            if not sink.got and sink not in left_meanwhile:
                live.leave(sink)
                left_meanwhile.append(sink)

    asyncio.get_running_loop().call_soon(leave_the_rest)
    written = await live.push("t", [Item(1), Item(2)], 0, 2, 2, encoder)

    pushed = [sink for sink in sinks if sink.got]
    assert left_meanwhile  # the push had sinks left to go after its first slice
    assert len(pushed) + len(left_meanwhile) == len(sinks)
    assert all(not sink.got for sink in left_meanwhile)
    body = b'event: record\ndata: {"topic":"t","records":[{"$seq":1},{"$seq":2}],'
    for sink in pushed:
        [[frame]] = sink.got
        assert frame is not None and frame.startswith(body)
    assert written == len(pushed)  # one record frame each
    assert dropped == [refusing] and not refusing.got
    assert len(live) == len(pushed)
