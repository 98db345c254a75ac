"""The live set of a topic's tailer: streams at its tail, and the frames pushed to them.

When the tailer reads new records, it builds each record frame once per group of streams that
would build the same bytes (same include flags, ``limit``, ``max_batch_bytes`` and node filter;
all at the same cursor) and hands the shared frames to every stream of the group, which only
puts its own id in front and writes. No task wakes per stream per record. A stream that cannot
take a push (it is not at that cursor, or its socket buffer is above its high-water mark)
leaves the live set and pages on its own until it is at the tail again.

Most streams watch one topic over chunked HTTP/1.1, and those of one group take the same wire
bytes, id included: they form the group's ``SoloRun``, whose push writes one ``bytes`` to each
member's transport and moves one number, the run's cursor, not a cursor per stream. A member's
own state reads its cursor through the run until it leaves (``SoloRun.cursor_of``: exact, even
in the middle of a push). The per-stream part of such a push is the write itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, TypeVar

from watch_service.protocol.paging import Sequenced, build_page
from watch_service.protocol.stream_state import Delivered, SharedFrame, StreamState, record_body

Flags = tuple[bool, bool, bool]  # a watch's (include_meta, include_tags, include_data)
Group = tuple[Flags, int, int, str | None]  # flags, limit, max_batch_bytes, node
TURN_S = 0.0003  # seconds a push runs before the loop's other work gets a turn
CHECK_EVERY = 32  # streams a push writes between two looks at the clock
HIGH_WATER = 256 * 1024  # socket buffer bytes above which a stream is not pushed to


class Item(Sequenced, Delivered, Protocol):
    """A cached record as the fan-out needs it."""


T = TypeVar("T", bound=Item)


class LiveSink(Protocol):
    """A stream live at a topic's tail."""

    @property
    def group(self) -> Group: ...

    def wake(self, topic: str) -> None:
        """The stream's subscription to the tailer: woken when it pages, not while live."""
        ...

    def push(
        self, topic: str, after: int, shared: Sequence[SharedFrame], upto: int, head: int
    ) -> bool:
        """Write the frames for the records after ``after`` (the record frames are counted by
        the caller, any other frame by the stream); False: the stream could not take them and
        pages on its own from here (it has left the live set). A stream outside its group's
        ``SoloRun`` builds its own frames from ``shared``."""
        ...

    def left(self, topic: str) -> None:
        """The tailer dropped the stream from its live set (the topic needs a tombstone or a
        deletion frame): it pages on its own from here."""
        ...

    def solo_transport(self, topic: str) -> Any | None:
        """The transport to write a ``SoloRun``'s bytes to, if this stream takes them as they
        are (one topic, the run's framing, nothing else to write first); else None."""
        ...

    def entered(self, run: SoloRun) -> None:
        """The stream joined ``run``: its cursor is the run's until ``exited``."""
        ...

    def exited(self, run: SoloRun, cursor: int, sent: int) -> None:
        """The stream left ``run`` at ``cursor`` (what it was written), having been handed
        ``sent`` bytes by the run meanwhile."""
        ...

    @staticmethod
    def run_wire(frames: Sequence[bytes]) -> bytes:
        """``frames`` as a run's member's transport takes them, in one write."""
        ...

    def counted(self, event: str, n: int) -> None:
        """``n`` frames of ``event`` other than records were written by a run push."""
        ...


def shared_frames(
    topic: str,
    items: Sequence[T],
    after: int,
    upto: int,
    head: int,
    group: Group,
    encoder: Callable[[Flags], Callable[[T], str]],
) -> list[SharedFrame]:
    """The record frames, as pages under ``group``'s options, for streams at cursor ``after``
    of the ``items`` that follow it (up to ``upto``)."""
    flags, limit, max_bytes, node = group
    encode = encoder(flags)
    out: list[SharedFrame] = []
    start, cursor = 0, after
    while start < len(items):
        page = build_page(
            items[start : start + limit], encode, limit=limit, max_bytes=max_bytes, upto=upto
        )
        if not page:
            break
        last = page[-1][0].seq
        out.append(SharedFrame(topic, last, record_body(topic, page, node, cursor, head)))
        start, cursor = start + len(page), last
    return out


class SoloRun:
    """The members of one group that take its frames as they are, all at ``cursor``.

    Members keep a slot each, in the order they joined (``transports``, ``slot_sinks``; a
    member leaving empties its slot, and a run with more empty slots than members is compacted
    before its next push), so a push walks one list it does not build. A push from ``cursor``
    to ``target`` hands the first ``pushing_to`` slots' members the same bytes in slot order
    (``done``: how many slots it has handled so far) and moves ``cursor`` once, at its end;
    until then ``cursor`` is what every member has for sure (the cursor flusher stores no more
    than that), and ``cursor_of`` tells a member leaving meanwhile exactly what it was
    written."""

    __slots__ = (
        "cursor",
        "done",
        "last_write",
        "members",
        "pushing",
        "pushing_to",
        "sent",
        "slot_sinks",
        "target",
        "transports",
    )

    def __init__(self, cursor: int) -> None:
        self.cursor = self.target = cursor
        self.members: dict[LiveSink, int] = {}  # member -> its slot
        self.transports: list[Any] = []  # a slot's member's transport, None once it left
        self.slot_sinks: list[LiveSink | None] = []
        self.pushing_to = -1  # the slots the push under way hands its bytes to; -1: none
        self.done = 0
        self.pushing = 0  # the bytes of the push under way
        self.sent = 0  # bytes the run's pushes handed each member that was there all along
        self.last_write = 0.0  # the loop's time at the last push's end (members' heartbeats)

    @property
    def holes(self) -> int:
        """Slots emptied since the last compaction."""
        return len(self.transports) - len(self.members)

    def add(self, sink: LiveSink, transport: Any) -> None:
        self.members[sink] = len(self.transports)
        self.transports.append(transport)
        self.slot_sinks.append(sink)

    def remove(self, sink: LiveSink) -> None:
        slot = self.members.pop(sink)
        self.transports[slot] = self.slot_sinks[slot] = None

    def compact(self) -> None:
        """Drop the empty slots (never during a push: slots are its positions)."""
        sinks = [s for s in self.slot_sinks if s is not None]
        self.transports = [t for t in self.transports if t is not None]
        self.slot_sinks = sinks  # type: ignore[assignment]
        self.members.clear()  # the same dict: a push holds it
        self.members.update((s, i) for i, s in enumerate(sinks))

    def cursor_of(self, sink: LiveSink) -> tuple[int, int]:
        """(cursor, bytes of the push under way it was handed) of a member as it leaves: the
        push under way, if any, has written the slots before ``done``; one that joined during
        it (a slot past ``pushing_to``) joined at its target."""
        if self.pushing_to < 0:
            return self.cursor, 0
        slot = self.members[sink]
        if slot >= self.pushing_to:
            return self.target, 0
        if slot >= self.done:
            return self.cursor, 0
        return self.target, self.pushing


class LiveSet:
    """The streams live at one topic's tail, by group: a group's ``SoloRun`` and the rest of
    its streams. ``on_leave`` hears of every stream the set drops by itself (a push it could
    not take, a tombstone due)."""

    def __init__(self, on_leave: Callable[[LiveSink], None] | None = None) -> None:
        self.groups: dict[Hashable, set[LiveSink]] = {}
        self.runs: dict[Hashable, SoloRun] = {}
        self._on_leave = on_leave
        self._turn_ends = 0.0

    def __len__(self) -> int:
        return sum(len(s) for s in self.groups.values()) + sum(
            len(r.members) for r in self.runs.values()
        )

    def __bool__(self) -> bool:
        return bool(self.groups or self.runs)

    def join(self, sink: LiveSink, topic: str, cursor: int) -> None:
        """``sink`` is live at ``cursor``, the tail. It joins its group's run if it takes the
        run's bytes and is where the run is (at the target of a push under way: one that
        joins meanwhile is at the tail already); otherwise the group's set, where a push
        finds one off its cursor and lets it page."""
        group = sink.group
        transport = sink.solo_transport(topic)
        if transport is not None:
            run = self.runs.get(group)
            if run is None:
                run = self.runs[group] = SoloRun(cursor)
            if (run.target if run.pushing_to >= 0 else run.cursor) == cursor:
                run.add(sink, transport)
                sink.entered(run)
                return
        self.groups.setdefault(group, set()).add(sink)

    def leave(self, sink: LiveSink) -> None:
        group = sink.group
        run = self.runs.get(group)
        if run is not None and sink in run.members:
            self._exit(group, run, sink)
            return
        sinks = self.groups.get(group)
        if sinks is not None:
            sinks.discard(sink)
            if not sinks:
                del self.groups[group]

    @staticmethod
    def _detach(run: SoloRun, sink: LiveSink) -> None:
        """``sink`` leaves ``run`` with exactly what it was written."""
        cursor, pushing = run.cursor_of(sink)
        run.remove(sink)
        sink.exited(run, cursor, pushing)

    def _exit(self, group: Hashable, run: SoloRun, sink: LiveSink) -> None:
        self._detach(run, sink)
        if not run.members and run.pushing_to < 0 and self.runs.get(group) is run:
            del self.runs[group]

    def _drop_member(self, group: Hashable, run: SoloRun, sink: LiveSink, topic: str) -> None:
        """The set drops a member of ``run``: it pages on its own from its exact cursor."""
        self._exit(group, run, sink)
        self._dropped(sink, topic)

    def drop_all(self, topic: str) -> None:
        """Every stream leaves (it has a tombstone or a deletion to page for)."""
        groups, self.groups = self.groups, {}
        runs, self.runs = self.runs, {}
        dropped: list[LiveSink] = []
        for run in runs.values():
            for sink in list(run.members):
                self._detach(run, sink)
                dropped.append(sink)
        for sinks in groups.values():
            dropped += sinks
        for sink in dropped:
            self._dropped(sink, topic)

    def _dropped(self, sink: LiveSink, topic: str) -> None:
        if self._on_leave is not None:
            self._on_leave(sink)
        sink.left(topic)

    async def push(
        self,
        topic: str,
        items: Sequence[T],
        after: int,
        upto: int,
        head: int,
        encoder: Callable[[Flags], Callable[[T], str]],
    ) -> int:
        """Push the records after ``after`` to every live stream, frames built once a group;
        returns the record frames written. After ``TURN_S`` of pushing the loop lets other work
        run (an append must not wait for a push to ten thousand streams; it needs several
        turns of the loop, each of which may come behind a slice of a push); a stream that
        left meanwhile is skipped."""
        written = 0
        self._turn_ends = time.perf_counter() + TURN_S
        for group in list({**self.runs, **self.groups}):
            shared = shared_frames(topic, items, after, upto, head, group, encoder)  # type: ignore[arg-type]
            if not shared:
                continue
            run = self.runs.get(group)
            if run is not None:
                written += await self._push_run(group, run, topic, after, shared, upto, head)
            sinks = self.groups.get(group)
            if sinks is not None:
                written += await self._push_set(group, sinks, topic, after, shared, upto, head)
        return written

    async def _turn(self) -> bool:
        """Give the loop a turn if this push has run for ``TURN_S``; True if it did."""
        if time.perf_counter() < self._turn_ends:
            return False
        await asyncio.sleep(0)
        self._turn_ends = time.perf_counter() + TURN_S
        return True

    def _page_all(self, group: Hashable, run: SoloRun, topic: str) -> None:
        for sink in list(run.members):
            self._drop_member(group, run, sink, topic)

    async def _push_run(
        self,
        group: Hashable,
        run: SoloRun,
        topic: str,
        after: int,
        shared: Sequence[SharedFrame],
        upto: int,
        head: int,
    ) -> int:
        """The run's push: the frames a one-topic stream at ``after`` gets (built once, by a
        ``StreamState`` standing for every member), the same bytes to each member's transport
        in one write. A member whose buffer is above ``HIGH_WATER``, or whose connection is
        closing, leaves the live set at ``after`` and pages on its own."""
        members = run.members
        if not members:
            return 0
        if run.cursor != after:  # a push the run missed (the tailer pushes all it caches)
            self._page_all(group, run, topic)
            return 0
        stand_in = StreamState({topic: after}, {topic: after}, node=group[3])  # type: ignore[index]
        stand_in.live[topic] = True
        out = stand_in.pushed(topic, after, shared, upto, head)
        target = stand_in.cursors[topic]
        if out is None or not stand_in.live[topic]:  # short of the tail after it: page
            self._page_all(group, run, topic)
            return 0
        first = next(iter(members))
        wire = type(first).run_wire([o.data for o in out]) if out else b""
        if run.holes > len(members):
            run.compact()
        transports, end = run.transports, len(run.transports)
        run.pushing_to, run.done, run.target, run.pushing = end, 0, target, len(wire)
        written, refused = 0, []
        try:
            for start in range(0, end if wire else 0, CHECK_EVERY):
                # A slot emptied while the loop had a turn is None: its member left.
                for t in transports[start : start + CHECK_EVERY]:
                    if t is None:
                        continue
                    if t.get_write_buffer_size() > HIGH_WATER or t.is_closing():
                        refused.append(t)
                    else:
                        t.write(wire)
                        written += 1
                for t in refused:  # not written: leaves at ``after``
                    sink = run.slot_sinks[transports.index(t, start)]
                    self._drop_member(group, run, sink, topic)  # type: ignore[arg-type]
                refused.clear()
                run.done = start + CHECK_EVERY
                if await self._turn() and self.runs.get(group) is not run:
                    break  # every stream was dropped meanwhile (a tombstone is due)
        finally:
            run.pushing_to, run.pushing = -1, 0
        run.cursor = target
        run.sent += len(wire)
        run.last_write = asyncio.get_running_loop().time()
        if not members and self.runs.get(group) is run:
            del self.runs[group]
        for o in out:
            if o.event != "record" and written:
                first.counted(o.event, written)
        return written * sum(1 for o in out if o.event == "record")

    async def _push_set(
        self,
        group: Hashable,
        sinks: set[LiveSink],
        topic: str,
        after: int,
        shared: Sequence[SharedFrame],
        upto: int,
        head: int,
    ) -> int:
        """The push to the group's streams outside its run, a slice of them a call."""
        written = 0
        per_sink = sum(1 for frame in shared if frame.body is not None)
        todo = list(sinks)
        yielded = False
        for start in range(0, len(todo), CHECK_EVERY):
            for sink in todo[start : start + CHECK_EVERY]:
                if yielded and sink not in sinks:  # it left while other work ran
                    continue
                if sink.push(topic, after, shared, upto, head):
                    written += per_sink
                else:
                    sinks.discard(sink)
                    if self._on_leave is not None:
                        self._on_leave(sink)
            if await self._turn():
                yielded = True
                if self.groups.get(group) is not sinks:
                    break  # every stream was dropped meanwhile (a tombstone is due)
        if not sinks and self.groups.get(group) is sinks:
            del self.groups[group]
        return written
