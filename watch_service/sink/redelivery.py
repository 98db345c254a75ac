"""What the sink knows of the copies it is sent again (``protocol.redelivery``): the records at
or below its cursor of their topic, as ranges of one verdict, found by comparing each with the
copy it landed before. Pure, and bounded: it keeps a fingerprint ($ts and payload hash) of the
last :data:`RECENT` seqs landed per topic; a copy of an older seq, or any after a restart, is
``unchecked``."""

from __future__ import annotations

from collections import OrderedDict

from watch_service.protocol.redelivery import DUPLICATE, REISSUED, UNCHECKED, Redelivery

RECENT = 16_384  # seqs remembered per topic (a dict entry each: about 2 MB a topic)


class Redeliveries:
    def __init__(self, recent: int = RECENT) -> None:
        self.recent = recent
        # Per topic, seq -> fingerprint, least recently landed first (``popitem(last=False)``
        # is O(1); a plain dict's first key is found by skipping the slots deleted before it).
        self._seen: dict[str, OrderedDict[int, int]] = {}
        self._open: dict[str, Redelivery] = {}
        self._done: list[Redelivery] = []

    def observe(
        self,
        topic: str,
        seq: int,
        ts: int | None,
        sha: str | None,
        cursor: int | None,
        frame_no: int,
    ) -> None:
        """One landed record copy; ``cursor``: the topic's cursor before its frame."""
        seen = self._seen.get(topic)
        if seen is None:
            seen = self._seen[topic] = OrderedDict()
        mark = hash((ts, sha))
        if cursor is not None and seq <= cursor:
            prior = seen.get(seq)
            verdict = UNCHECKED if prior is None else DUPLICATE if prior == mark else REISSUED
            self._extend(topic, seq, verdict, cursor, frame_no)
        else:
            self._close(topic)
        seen[seq] = mark
        seen.move_to_end(seq)
        if len(seen) > self.recent:
            seen.popitem(last=False)

    def _extend(self, topic: str, seq: int, verdict: str, cursor: int, frame_no: int) -> None:
        now = self._open.get(topic)
        if now is not None and now.verdict == verdict and now.seq_to + 1 == seq:
            self._open[topic] = Redelivery(
                topic, now.seq_from, seq, verdict, now.cursor, (now.frames[0], frame_no)
            )
            return
        self._close(topic)
        self._open[topic] = Redelivery(topic, seq, seq, verdict, cursor, (frame_no, frame_no))

    def _close(self, topic: str) -> None:
        done = self._open.pop(topic, None)
        if done is not None:
            self._done.append(done)

    def take(self) -> list[Redelivery]:
        """Every range since the last call, in the order they began (open ones closed: a range
        a flush splits is merged back by the reader, ``protocol.redelivery.merge``)."""
        for topic in list(self._open):
            self._close(topic)
        done, self._done = self._done, []
        return sorted(done, key=lambda r: r.frames[0])
