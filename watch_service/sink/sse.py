"""An incremental Server-Sent Events parser: bytes in, events out (WHATWG HTML §9.2.6).

Pure: no sockets, no clocks. Feed it whatever chunks the transport hands over — a frame may
be split anywhere, even inside a UTF-8 sequence or between the ``\\r`` and ``\\n`` of a CRLF —
and it returns the items completed by that chunk. Lines end with CRLF, LF or CR; one leading
byte-order mark is skipped; ``field: value`` drops one space after the colon; ``data`` lines
join with ``\\n``; a blank line dispatches; a line starting with ``:`` is a comment (the watch
protocol's heartbeat is the comment ``hb``); ``retry`` takes only ASCII digits; an ``id``
containing NUL is ignored. Comments and retry changes are surfaced as items too, so a client
can see heartbeats and honour ``retry:`` without reaching into the parser.
"""

from __future__ import annotations

import codecs
import dataclasses
import re

_EOL = re.compile(r"\r\n|\r|\n")


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    type: str
    data: str
    id: str  # the last event id in force at dispatch ("" if none was ever set)


@dataclasses.dataclass(frozen=True, slots=True)
class Comment:
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Retry:
    ms: int


Item = Event | Comment | Retry


class SseParser:
    """Incremental parser state for one connection (make a new one per reconnect)."""

    def __init__(self, last_event_id: str = "") -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False
        self._skip_lf = False
        self._pending: list[str] = []
        self._data: list[str] = []
        self._event_type = ""
        self.last_event_id = last_event_id

    def feed(self, chunk: bytes) -> list[Item]:
        """Consume ``chunk``; return the items it completes, in stream order."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text[:1] == "\n":
                text = text[1:]
        if "\n" not in text and "\r" not in text:
            if text:
                self._pending.append(text)
            return []
        if self._pending:
            self._pending.append(text)
            text = "".join(self._pending)
            self._pending = []
        lines = _EOL.split(text)
        rest = lines.pop()
        if rest:
            self._pending.append(rest)
        # A CR at the very end may be the first half of a CRLF split across chunks.
        self._skip_lf = text.endswith("\r")
        out: list[Item] = []
        for line in lines:
            self._line(line, out)
        return out

    def _line(self, line: str, out: list[Item]) -> None:
        if not line:
            self._dispatch(out)
            return
        if line[0] == ":":
            out.append(Comment(line[1:].removeprefix(" ")))
            return
        field, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event_type = value
        elif field == "id" and "\0" not in value:
            self.last_event_id = value
        elif field == "retry" and value and value.isascii() and value.isdigit():
            out.append(Retry(int(value)))
        # Any other field is ignored, as the standard requires.

    def _dispatch(self, out: list[Item]) -> None:
        data, event_type = self._data, self._event_type
        self._data, self._event_type = [], ""
        if not data:
            return
        out.append(Event(event_type or "message", "\n".join(data), self.last_event_id))
