"""Unit tests for the live set's push: every live sink gets the shared frames, a slice of
``CHECK_EVERY`` sinks a call; a sink that cannot take them leaves the set; a turn of the loop
may come between two slices, and a sink that left during it is not pushed to. A run (one-topic
streams at one cursor) hands each member the same bytes and moves one cursor, and a member
leaving keeps exactly what it was written. No sockets: the sinks record what they were
handed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from watch_service.engine import fanout
from watch_service.engine.fanout import (
    CHECK_EVERY,
    HIGH_WATER,
    Flags,
    Group,
    LiveSet,
    LiveSink,
    SoloRun,
)
from watch_service.protocol.stream_state import SharedFrame, StreamState

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

    def solo_transport(self, topic: str) -> None:
        return None  # a sink of its own: never in a run

    def entered(self, run: SoloRun) -> None:
        raise AssertionError("never in a run")

    def exited(self, run: SoloRun, cursor: int, sent: int) -> None:
        raise AssertionError("never in a run")

    @staticmethod
    def run_wire(frames: Sequence[bytes]) -> bytes:
        raise AssertionError("never in a run")

    def counted(self, event: str, n: int) -> None:
        raise AssertionError("never in a run")

    def push(
        self, topic: str, after: int, shared: Sequence[SharedFrame], upto: int, head: int
    ) -> bool:
        if self.refuse:
            return False
        self.got.append([frame.body for frame in shared])
        return True


async def test_a_push_reaches_every_live_sink_slice_by_slice(monkeypatch):
    monkeypatch.setattr(fanout, "TURN_S", 0.0)  # the loop gets a turn after every slice
    dropped: list[LiveSink] = []
    live = LiveSet(dropped.append)
    sinks = [Sink() for _ in range(2 * CHECK_EVERY + 5)]
    refusing = Sink(refuse=True)
    for sink in [*sinks, refusing]:
        live.join(sink, "t", 0)
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


# -- runs: one-topic streams that take the same bytes ------------------------------------------
class Transport:
    """The part of an asyncio transport a run writes to: what it was handed, in order."""

    def __init__(self, buffered: int = 0, closing: bool = False) -> None:
        self.writes: list[bytes] = []
        self.buffered, self.closing = buffered, closing

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return self.closing


class RunSink:
    """A one-topic stream's state (the real ``StreamState``) behind a transport: what the
    server's stream does with a run, without the socket."""

    def __init__(self, cursor: int, transport: Transport | None = None) -> None:
        self.group = GROUP
        self.state = StreamState({"t": cursor}, {"t": 0})
        self.state.live["t"] = True
        self.transport = transport or Transport()
        self.left_at: list[int] = []  # the cursor it had each time the live set dropped it
        self.run_sent = 0  # the bytes ``exited`` said a run handed it
        self.events: dict[str, int] = {}

    def wake(self, topic: str) -> None:
        pass

    def left(self, topic: str) -> None:
        self.left_at.append(self.state.cursors[topic])

    def solo_transport(self, topic: str) -> Transport:
        return self.transport

    def entered(self, run: SoloRun) -> None:
        self.base = run.sent
        self.state.joined_run(run)

    def exited(self, run: SoloRun, cursor: int, sent: int) -> None:
        self.state.left_run(cursor)
        self.run_sent += run.sent - self.base + sent

    @staticmethod
    def run_wire(frames: Sequence[bytes]) -> bytes:
        return b"|".join(frames)

    def counted(self, event: str, n: int) -> None:
        self.events[event] = self.events.get(event, 0) + n

    def push(
        self, topic: str, after: int, shared: Sequence[SharedFrame], upto: int, head: int
    ) -> bool:
        raise AssertionError("a run's members are not pushed one by one")


def frame_of(cursor: int, records: list[int], after: int, head: int) -> bytes:
    """The record frame every one-topic stream at ``after`` gets (its id: the cursor map)."""
    state = StreamState({"t": after}, {"t": after})
    state.live["t"] = True
    shared = fanout.shared_frames(
        "t", [Item(s) for s in records], after, head, head, GROUP, encoder
    )
    out = state.pushed("t", after, shared, head, head)
    assert out is not None and state.cursors["t"] == cursor
    return out[0].data


async def test_a_run_hands_every_member_the_same_bytes_and_moves_one_cursor():
    live = LiveSet()
    members = [RunSink(2) for _ in range(3 * CHECK_EVERY)]
    for sink in members:
        live.join(sink, "t", 2)
    assert len(live) == len(members) and not live.groups and list(live.runs) == [GROUP]
    written = await live.push("t", [Item(3), Item(4)], 2, 4, 4, encoder)

    assert written == len(members)  # one record frame each
    frame = frame_of(4, [3, 4], 2, 4)
    assert frame.startswith(b"id: ") and b'"from_seq":2,"to_seq":4,"head_seq":4' in frame
    for sink in members:
        assert sink.transport.writes == [frame]  # one write: the frame, id included
        assert sink.state.cursors == {"t": 4} and sink.state.dirty
    assert live.runs[GROUP].cursor == 4


async def test_a_member_that_cannot_take_a_push_leaves_at_its_start():
    dropped: list[LiveSink] = []
    live = LiveSet(dropped.append)
    full = RunSink(2, Transport(buffered=HIGH_WATER + 1))
    closing = RunSink(2, Transport(closing=True))
    ok = RunSink(2)
    for sink in (full, ok, closing):
        live.join(sink, "t", 2)
    assert await live.push("t", [Item(3)], 2, 3, 3, encoder) == 1

    assert dropped == [full, closing] or dropped == [closing, full]
    for sink in (full, closing):
        assert sink.transport.writes == [] and sink.left_at == [2]
        assert sink.state.run is None and sink.state.cursors == {"t": 2}
    assert ok.state.cursors == {"t": 3} and len(live) == 1


async def test_a_member_leaving_during_a_push_keeps_exactly_what_it_was_written(monkeypatch):
    monkeypatch.setattr(fanout, "TURN_S", 0.0)  # the loop gets a turn after every slice
    live = LiveSet()
    members = [RunSink(5) for _ in range(2 * CHECK_EVERY)]
    for sink in members:
        live.join(sink, "t", 5)
    seen: dict[int, tuple[bool, int | None]] = {}

    def leave_two() -> None:  # the first turn the push gives: one slice written, one not
        written, waiting = members[0], members[-1]
        for sink in (written, waiting):
            seen[id(sink)] = (bool(sink.transport.writes), None)
            live.leave(sink)
        # meanwhile what the flusher reads of a member is only what all of them have for sure
        seen[0] = (False, members[1].state.cursors["t"])

    asyncio.get_running_loop().call_soon(leave_two)
    await live.push("t", [Item(6)], 5, 6, 6, encoder)

    written, waiting = members[0], members[-1]
    assert seen[id(written)][0] and not seen[id(waiting)][0]
    assert written.state.cursors == {"t": 6} and written.run_sent == len(
        written.transport.writes[0]
    )
    assert waiting.state.cursors == {"t": 5} and waiting.transport.writes == []
    assert waiting.run_sent == 0
    assert seen[0] == (False, 5)
    for sink in members[1:-1]:
        assert sink.state.cursors == {"t": 6} and len(sink.transport.writes) == 1


async def test_a_sink_off_the_runs_cursor_waits_in_the_group_set():
    live = LiveSet()
    at, behind = RunSink(7), RunSink(6)
    live.join(at, "t", 7)
    live.join(behind, "t", 6)
    assert list(live.runs[GROUP].members) == [at] and live.groups[GROUP] == {behind}


async def test_a_run_push_of_several_pages_is_one_write_ending_with_caught_up():
    group: Group = ((False, False, True), 1, 1 << 20, None)  # one record a page
    live = LiveSet()
    sinks = [RunSink(0) for _ in range(2)]
    for sink in sinks:
        sink.group = group
        live.join(sink, "t", 0)
    assert await live.push("t", [Item(1), Item(2)], 0, 2, 2, encoder) == 4  # 2 record frames each
    for sink in sinks:
        [wire] = sink.transport.writes
        frames = wire.split(b"|")
        assert [f.split(b"\n")[1] for f in frames] == [
            b"event: record",
            b"event: record",
            b"event: caught-up",
        ]
        assert sink.state.cursors == {"t": 2} and sink.state.live["t"]
    assert sinks[0].events == {"caught-up": 2}  # counted once for all members


async def test_a_run_keeps_its_members_slots_across_leaves_joins_and_compaction(monkeypatch):
    """Members leave empty slots that later pushes skip; one joining during a push (at its
    target) is not handed that push's bytes, and leaving during it keeps the target; once more
    slots are empty than full, the run compacts in join order before its next push."""
    monkeypatch.setattr(fanout, "TURN_S", 0.0)  # the loop gets a turn after every slice
    live = LiveSet()
    members = [RunSink(1) for _ in range(2 * CHECK_EVERY)]
    for sink in members:
        live.join(sink, "t", 1)
    run = live.runs[GROUP]
    gone = members[: CHECK_EVERY + 8]
    for sink in gone:
        live.leave(sink)
    assert run.holes == len(gone) and len(run.transports) == 2 * CHECK_EVERY

    late, left_late = RunSink(2), RunSink(2)

    def join_during_push() -> None:
        live.join(late, "t", 2)  # the push's target: the tail once it ends
        live.join(left_late, "t", 2)
        live.leave(left_late)

    asyncio.get_running_loop().call_soon(join_during_push)
    stay = members[len(gone) :]
    assert await live.push("t", [Item(2)], 1, 2, 2, encoder) == len(stay)
    # compacted before the push, then two joined and one of them left
    assert len(run.transports) == len(stay) + 2 and run.holes == 1
    assert [s for s in run.slot_sinks if s is not None] == [*stay, late]
    assert late.transport.writes == [] and late.state.cursors == {"t": 2}
    assert left_late.state.cursors == {"t": 2} and left_late.run_sent == 0
    for sink in gone:
        assert sink.transport.writes == [] and sink.state.cursors == {"t": 1}

    assert await live.push("t", [Item(3)], 2, 3, 3, encoder) == len(stay) + 1
    for sink in [*stay, late]:
        assert sink.transport.writes[-1] == frame_of(3, [3], 2, 3)
        assert sink.state.cursors == {"t": 3}
    assert [len(s.transport.writes) for s in stay] == [2] * len(stay)
