"""``AUDITSYNC_MAX_STREAMS`` as a service-wide cap: the count of open SSE watch streams that a
``GET /v0/watch/{wid}`` must find below the cap (else 429), and that its stream holds a slot of
until it ends.

``StreamSlots`` counts one process's streams (``serve --workers 1``, tests). Under
``serve --workers N`` each worker takes ``SharedStreamSlots``: one signed 64-bit count per
worker in a file of the supervisor's private folder, mapped by every worker; a take sums the
counts and adds to its own under an exclusive ``flock`` of that file, so two workers cannot
both take the last slot, and the (cap+1)-th open stream of the whole service is refused
whichever worker it reaches. Each worker's count also places streams: one is passed to its
topic's owner only while that worker holds few (``AUDITSYNC_STREAMS_TO_OWNER``). The file
goes with the folder when the service stops.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct

_COUNT = struct.Struct("<q")
FILE_NAME = "stream-slots"


class StreamSlots:
    """The streams of one process, against ``cap``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0  # this process's open streams

    def try_take(self) -> bool:
        """Take a slot; False (nothing taken) when the service holds ``cap`` already."""
        if self.held >= self.cap:
            return False
        self.held += 1
        return True

    def give_back(self) -> None:
        self.held -= 1

    def held_by(self, index: int) -> int:
        """The open streams of worker ``index`` (this process's own: there is no other)."""
        return self.held

    def close(self) -> None:
        pass


class SharedStreamSlots(StreamSlots):
    """The streams of every worker of one ``serve``, against one ``cap``."""

    def __init__(self, cap: int, folder: str, index: int, workers: int) -> None:
        super().__init__(cap)
        self.index, self.workers = index, workers
        self.fd = os.open(os.path.join(folder, FILE_NAME), os.O_RDWR | os.O_CREAT, 0o600)
        size = _COUNT.size * workers
        with self._locked():
            if os.fstat(self.fd).st_size < size:
                os.ftruncate(self.fd, size)  # zeros: no worker holds a slot yet
        self.map = mmap.mmap(self.fd, size)
        self.closed = False

    def _locked(self) -> _Flock:
        return _Flock(self.fd)

    def total(self) -> int:
        return sum(self._count(i) for i in range(self.workers))

    def _count(self, index: int) -> int:
        return _COUNT.unpack_from(self.map, index * _COUNT.size)[0]

    def held_by(self, index: int) -> int:
        """The open streams of worker ``index`` as it last stored them (no lock: a count a
        moment old is good enough to place a stream by)."""
        return 0 if self.closed else self._count(index)

    def try_take(self) -> bool:
        if self.closed:  # the worker is stopping
            return False
        with self._locked():
            if self.total() >= self.cap:
                return False
            self._add(1)
        return True

    def give_back(self) -> None:
        if self.closed:  # a stream that outlived the worker's cleanup: the file goes too
            return
        with self._locked():
            self._add(-1)

    def _add(self, delta: int) -> None:
        self.held += delta
        _COUNT.pack_into(self.map, self.index * _COUNT.size, self.held)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.map.close()
            os.close(self.fd)


class _Flock:
    """An exclusive ``flock`` for a ``with`` block: held for a sum and a store, microseconds."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *_exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
