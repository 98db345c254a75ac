"""The live set of a topic's tailer: streams at its tail, and the frames pushed to them.

When the tailer reads new records, it builds each record frame once per group of streams that
would build the same bytes (same include flags, ``limit``, ``max_batch_bytes`` and node filter;
all at the same cursor) and hands the shared frames to every stream of the group, which only
puts its own id in front and writes. No task wakes per stream per record. A stream that cannot
take a push (it is not at that cursor, or its socket buffer is above its high-water mark)
leaves the live set and pages on its own until it is at the tail again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, TypeVar

from watch_service.protocol.paging import Sequenced, build_page
from watch_service.protocol.stream_state import Delivered, SharedFrame, record_body

Flags = tuple[bool, bool, bool]  # a watch's (include_meta, include_tags, include_data)
Group = tuple[Flags, int, int, str | None]  # flags, limit, max_batch_bytes, node
TURN_S = 0.0003  # seconds a push runs before the loop's other work gets a turn
CHECK_EVERY = 32  # streams pushed to in one ``push_each``: one look at the clock after each


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

    @staticmethod
    def push_each(
        sinks: Sequence[LiveSink],
        topic: str,
        after: int,
        shared: Sequence[SharedFrame],
        upto: int,
        head: int,
    ) -> list[LiveSink]:
        """Write to each of ``sinks`` (all of this class) the frames for the records after
        ``after`` (the record frames are counted by the caller, any other frame by the
        stream); returns the sinks that could not take them and page on their own from here
        (they have left the live set). One call a slice of sinks, not one a sink: the
        per-socket part of a push is the fan-out's cost."""
        ...

    def left(self, topic: str) -> None:
        """The tailer dropped the stream from its live set (the topic needs a tombstone or a
        deletion frame): it pages on its own from here."""
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


class LiveSet:
    """The streams live at one topic's tail, by group. ``on_leave`` hears of every stream the
    set drops by itself (a push it could not take, a tombstone due)."""

    def __init__(self, on_leave: Callable[[LiveSink], None] | None = None) -> None:
        self.groups: dict[Hashable, set[LiveSink]] = {}
        self._on_leave = on_leave

    def __len__(self) -> int:
        return sum(len(s) for s in self.groups.values())

    def join(self, sink: LiveSink) -> None:
        self.groups.setdefault(sink.group, set()).add(sink)

    def leave(self, sink: LiveSink) -> None:
        sinks = self.groups.get(sink.group)
        if sinks is not None:
            sinks.discard(sink)
            if not sinks:
                del self.groups[sink.group]

    def drop_all(self, topic: str) -> None:
        """Every stream leaves (it has a tombstone or a deletion to page for)."""
        groups, self.groups = self.groups, {}
        for sinks in groups.values():
            for sink in sinks:
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
        turn_ends = time.perf_counter() + TURN_S
        for group, sinks in list(self.groups.items()):
            shared = shared_frames(topic, items, after, upto, head, group, encoder)  # type: ignore[arg-type]
            if not shared:
                continue
            per_sink = sum(1 for frame in shared if frame.body is not None)
            todo = list(sinks)
            yielded = False
            for start in range(0, len(todo), CHECK_EVERY):
                chunk = todo[start : start + CHECK_EVERY]
                if yielded:  # streams may have left while other work ran
                    chunk = [sink for sink in chunk if sink in sinks]
                    if not chunk:
                        continue
                refused = type(chunk[0]).push_each(chunk, topic, after, shared, upto, head)
                written += per_sink * (len(chunk) - len(refused))
                for sink in refused:
                    sinks.discard(sink)
                    if self._on_leave is not None:
                        self._on_leave(sink)
                if time.perf_counter() >= turn_ends:
                    await asyncio.sleep(0)
                    yielded = True
                    turn_ends = time.perf_counter() + TURN_S
                    if self.groups.get(group) is not sinks:
                        break  # every stream was dropped meanwhile (a tombstone is due)
            if not sinks and self.groups.get(group) is sinks:
                del self.groups[group]
        return written
