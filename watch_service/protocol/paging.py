"""The page rule: which records one delivery carries, under a count, a seq bound and a byte
budget.

Every reader that hands records to a consumer (the tailer's cache, a backlog page read from
PostgreSQL, the follow loop under the Permify and SpiceDB watches) builds its pages here, so a
page means the same thing everywhere: records in seq order, at most ``limit`` of them, none past
``upto``, and encodings no longer in total than ``max_bytes`` — except that a page always
carries its first record, however large, so a single oversized record still moves the cursor.
The budget counts characters of the encoded JSON text (bytes, for ASCII payloads), as the
watch's ``max_batch_bytes`` always has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import Protocol, TypeVar


class Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


T = TypeVar("T", bound=Sequenced)


def build_page(
    items: Iterable[T], encode: Callable[[T], str], *, limit: int, max_bytes: int, upto: int
) -> list[tuple[T, str]]:
    """The leading items of ``items`` (in seq order) that make one page, each with its
    encoding; ``encode`` is called only for items that are considered."""
    out: list[tuple[T, str]] = []
    size = 0
    for item in islice(items, limit):
        if item.seq > upto:
            break
        enc = encode(item)
        if out and size + len(enc) > max_bytes:
            break
        out.append((item, enc))
        size += len(enc)
    return out
