"""The per-stream state machine of an SSE watch, as pure code.

The I/O shell (``server.watch_stream``) reads pages and writes bytes; this module decides which
frames those bytes are and what the stream's state becomes:

- the per-topic cursor map, which moves only when the shell reports a frame written
  (``written``): a frame lost with its connection is sent again on resume;
- the frame id: the whole cursor map as it will be once that frame is written;
- live / caught-up: a topic goes live, with one ``caught-up`` frame, once its cursor reaches the
  deliverable head; a page that leaves it short of that bound makes it catch up again;
- the tombstone rule: a gap under the session's own ``from_seq`` before the topic was ever live
  is ``from_seq_too_old``; any other gap carries the reason the store recorded for it;
- which records a frame carries (the watch's ``node`` filter drops the watcher's own writes);
- the rewind rule: a topic whose head is below a cursor the consumer holds (the stream's own,
  or one it presented: ``Last-Event-ID``, a checkpoint token, the POST's ``from_seq``) went back
  (failover, restore); one ``rewound`` frame names ``head + 1 .. that cursor`` and moves the
  cursor back to the head, so the seqs written again arrive as ordinary records.

A frame is built and written before the next one is built: its id and ``from_seq`` read the
cursor map as it stands. Frames pushed by a topic's tailer (``pushed``) share their bytes with
every stream live at that tail; only the id line is this stream's (``frame_id``, the one place
an id is built).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol import frames
from watch_service.protocol.tombstones import missed_range, rewound_range

FROM_SEQ_TOO_OLD = "from_seq_too_old"
CAUGHT_UP = "caught-up"
REWOUND = "rewound"
SOURCE_REWOUND = "source_rewound"


class Delivered(Protocol):
    """What a frame needs of a record besides its encoding: a ``Record``, or the tailer's
    cached item of one."""

    @property
    def seq(self) -> int: ...

    @property
    def node(self) -> str | None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    """One frame to write, and the cursor its topic has once it is written."""

    topic: str
    event: str
    cursor: int
    data: bytes


def frame_id_of(cursors: dict[str, int]) -> str:
    """THE frame id of a cursor map: every id a stream sends is made here."""
    return cursor_codec.frame_id(cursors)


class SharedFrame:
    """A record frame built once for every stream at one cursor with one set of options:
    ``body`` is the frame without its id line (None: the node filter dropped every record),
    ``cursor`` the topic's cursor once it is written. Streams of one-topic sessions share the
    whole frame, id included (``solo``), made on first use."""

    __slots__ = ("_solo", "body", "cursor", "topic")

    def __init__(self, topic: str, cursor: int, body: bytes | None) -> None:
        self.topic, self.cursor, self.body = topic, cursor, body
        self._solo: bytes | None = None

    def solo(self) -> bytes:
        if self._solo is None:
            assert self.body is not None
            frame_id = frame_id_of({self.topic: self.cursor})
            self._solo = frames.with_id(frame_id, self.body)
        return self._solo


def record_body(
    topic: str,
    page: Sequence[tuple[Delivered, str]],
    node: str | None,
    from_seq: int,
    head: int,
) -> bytes | None:
    """The id-less record frame for a non-empty page, or None when ``node`` filters out every
    record (the cursor then moves past them without a frame)."""
    encoded = [enc for rec, enc in page if node is None or rec.node != node]
    if not encoded:
        return None
    last = page[-1][0].seq
    return frames.frame_body("record", frames.record_data(topic, encoded, from_seq, last, head))


@dataclasses.dataclass(frozen=True, slots=True)
class Loss:
    """Seqs ``gap_from..gap_to`` a cursor can no longer get. ``reason`` is None when the
    store's gaps decide it (``store.topics.gap_reason``)."""

    gap_from: int
    gap_to: int
    reason: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Settled:
    """What follows a page: ``drained`` (nothing more to send for the topic now) and the
    ``caught-up`` frame to write first, if the topic just went live."""

    drained: bool
    caught_up: Outgoing | None = None


class RunCursor(Protocol):
    """The cursor of a one-topic stream that a run of such streams moves for all of them
    (``engine.fanout.SoloRun``)."""

    @property
    def cursor(self) -> int: ...


class StreamState:
    """Cursors, live flags and frame building for one open stream over its session's topics.

    While a one-topic stream is in a run (``run``), its cursor is the run's: ``cursors`` and
    ``dirty`` read it there, and ``left_run`` puts back the one it leaves at."""

    def __init__(
        self,
        cursors: dict[str, int],
        initial: dict[str, int],
        *,
        node: str | None = None,
        strong: bool = False,
        claimed: dict[str, int] | None = None,
    ) -> None:
        self._cursors = dict(cursors)  # session topic order: the order of every frame id
        self.run: RunCursor | None = None
        self.initial = dict(initial)  # the session's requested from_seq, per topic
        # Cursors the client presented above the ones the stream starts from (a Last-Event-ID
        # ahead of the session's): checked against the head before the topic's first page.
        self.claimed = {t: c for t, c in (claimed or {}).items() if c > self._cursors.get(t, c)}
        self.node, self.strong = node, strong
        self.live = dict.fromkeys(cursors, False)
        self._dirty = False  # cursors moved since the shell last persisted them

    @property
    def cursors(self) -> dict[str, int]:
        """The cursor map (the run's cursor for the one topic of a stream in a run)."""
        if self.run is not None:
            self._sync(self.run.cursor)
        return self._cursors

    @property
    def dirty(self) -> bool:
        """Cursors moved since the shell last persisted them."""
        if self.run is not None and not self._dirty:
            self._sync(self.run.cursor)
        return self._dirty

    @dirty.setter
    def dirty(self, value: bool) -> None:
        self._dirty = value

    def _sync(self, cursor: int) -> None:
        for topic, mine in self._cursors.items():  # the one topic
            if mine != cursor:
                self._cursors[topic] = cursor
                self._dirty = True

    def joined_run(self, run: RunCursor) -> None:
        """The one topic's cursor is ``run``'s from now on (it is there now)."""
        self._sync(run.cursor)
        self.run = run

    def left_run(self, cursor: int) -> None:
        """Out of the run at ``cursor``: the stream's own again."""
        self.run = None
        self._sync(cursor)

    # -- cursors -------------------------------------------------------------------------
    def frame_id(self, topic: str, cursor: int) -> str:
        """The id of a frame of ``topic`` that moves its cursor to ``cursor``: the map with the
        other topics' cursors as they stand."""
        return frame_id_of({**self.cursors, topic: cursor})

    def frame(self, topic: str, event: str, data: str, cursor: int) -> Outgoing:
        """A frame of ``topic`` whose id carries ``cursor`` for it and the others' cursors."""
        body = frames.frame_body(event, data)
        return Outgoing(topic, event, cursor, frames.with_id(self.frame_id(topic, cursor), body))

    def written(self, out: Outgoing) -> None:
        """``out`` reached the socket: its topic's cursor moves (and a caught-up makes the
        topic live)."""
        self.cursors[out.topic] = out.cursor
        self.dirty = True
        if out.event == CAUGHT_UP:
            self.live[out.topic] = True
        elif out.event == REWOUND:
            self.live[out.topic] = False  # the seqs written again come before a caught-up

    # -- what a topic may deliver --------------------------------------------------------
    def upto(self, head: int, durable_head: int, flushed: bool = False) -> int:
        """The newest seq deliverable now: under ``consistency: strong`` only seqs whose commit
        is flushed (all of them when the read saw the WAL flushed past its own insert)."""
        return durable_head if self.strong and not flushed else head

    def loss(self, topic: str, after: int, earliest_seq: int) -> Loss | None:
        """The gap between ``after`` and the topic's retained history, if any, and its reason
        when the stream itself decides it."""
        missed = missed_range(after, earliest_seq)
        if missed is None:
            return None
        too_old = after == self.initial.get(topic) and not self.live[topic]
        return Loss(missed[0], missed[1], FROM_SEQ_TOO_OLD if too_old else None)

    # -- frames --------------------------------------------------------------------------
    def rewound(self, topic: str, head_seq: int) -> Outgoing | None:
        """The ``rewound`` frame when the topic's head is below the highest cursor the consumer
        holds for it (checked once per presented cursor, then against the stream's own);
        written, it moves the cursor back to the head (or keeps an older one: nothing is
        skipped)."""
        cursor = self.cursors[topic]
        served = max(cursor, self.claimed.pop(topic, cursor))
        rewound = rewound_range(served, head_seq)
        if rewound is None:
            return None
        data = frames.rewound_data(topic, SOURCE_REWOUND, rewound[0], rewound[1], head_seq)
        return self.frame(topic, REWOUND, data, min(cursor, head_seq))

    def tombstone(
        self, topic: str, loss: Loss, reason: str, earliest_seq: int, head_seq: int
    ) -> Outgoing:
        """The tombstone for ``loss``; written, it moves the cursor past the gap."""
        data = frames.tombstone_data(
            topic, reason, loss.gap_from, loss.gap_to, earliest_seq, head_seq
        )
        return self.frame(topic, "tombstone", data, loss.gap_to)

    def records(
        self, topic: str, page: Sequence[tuple[Delivered, str]], head: int
    ) -> Outgoing | None:
        """The record frame for a non-empty page of (record, encoding). None when the node
        filter drops every record: the cursor then moves past them without a frame."""
        last = page[-1][0].seq
        body = record_body(topic, page, self.node, self.cursors[topic], head)
        if body is None:
            self.cursors[topic] = last
            self.dirty = True
            return None
        return Outgoing(topic, "record", last, frames.with_id(self.frame_id(topic, last), body))

    def pushed(
        self, topic: str, after: int, shared: Sequence[SharedFrame], upto: int, head: int
    ) -> list[Outgoing] | None:
        """The frames for pages a tailer pushes to this stream (built for streams at cursor
        ``after``), then ``caught-up`` if a page left the topic short of ``upto`` and the last
        one reached it — the same frames, in the same order, as paging them one by one would
        give. The caller writes them all before anything else is written, so they count as
        written here. None: this stream is not at ``after`` and must page on its own."""
        if self.cursors.get(topic) != after:
            return None
        out = []
        solo = len(self.cursors) == 1
        for item in shared:
            if item.body is not None:
                if solo:
                    frame = item.solo()
                else:
                    frame = frames.with_id(self.frame_id(topic, item.cursor), item.body)
                out.append(Outgoing(topic, "record", item.cursor, frame))
            self.cursors[topic] = item.cursor
            if item.cursor < upto:
                self.live[topic] = False
        self.dirty = True
        cursor = self.cursors[topic]
        if not self.live[topic] and cursor >= upto >= head:
            caught_up = self.frame(topic, CAUGHT_UP, frames.caught_up_data(topic, upto), cursor)
            self.written(caught_up)
            out.append(caught_up)
        return out

    def topic_deleted(self, topic: str, after: int, head: int) -> Outgoing:
        """The last frame of a deleted topic; its cursor ends at the topic's final head."""
        return self.frame(
            topic, "topic-deleted", frames.topic_deleted_data(topic, head), max(after, head)
        )

    def settle(self, topic: str, page_empty: bool, upto: int, head: int) -> Settled:
        """After a page of ``topic`` was sent (or found empty): done for now, or more to
        send. A topic turns live (one ``caught-up``) only at the head itself: under
        ``strong``, records past the durable head wait for their flush."""
        cursor = self.cursors[topic]
        if page_empty or cursor >= upto:
            if not self.live[topic] and cursor >= upto >= head:
                return Settled(
                    True, self.frame(topic, CAUGHT_UP, frames.caught_up_data(topic, upto), cursor)
                )
            return Settled(True)
        self.live[topic] = False
        return Settled(False)
