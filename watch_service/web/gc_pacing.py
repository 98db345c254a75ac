"""Full garbage collections that walk what is new, not everything that is alive.

CPython 3.11 collects its oldest generation by walking every tracked object, each time the
objects promoted there have grown by a quarter. A worker opening five thousand streams grew its
heap that way eight or nine times: full collections of 250-440 ms each, 1.4-1.6 s in all, every
stream's delivery stopped meanwhile (measured with a ``gc.callbacks`` probe, ``bench/watch.py``'s
10,000-stream level on two workers). None of them found any garbage: what had been promoted was
what the open streams hold, and it lives as long as they do.

``GcPacer`` freezes (``gc.freeze``) whatever survived each full collection, so the next one
walks only what came since: 7-8 full collections of 12-91 ms, 0.3-0.37 s in all, in the same
run. The price is that a reference cycle among frozen objects is not collected while they stay
frozen; an ended stream leaves such cycles (about eight objects). So the pacer thaws
(``gc.unfreeze``) once as many streams have ended since the last thaw as are open, and at least
once every ``THAW_EVERY_S``, whatever else may hold cycles: the next full collection walks
everything once and takes them. Frozen garbage is bounded by what the ended streams (at most as
many as are open, or ``THAW_MIN_ENDED``) and an hour of other work left.

One pacer per process (``serve`` makes it; the garbage collector is the process's), removed
with ``close``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

THAW_MIN_ENDED = 1000  # streams ended since the last thaw that make one due, at the least
THAW_EVERY_S = 3600.0  # the longest a frozen object waits to be looked at again


class GcPacer:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.thawed_at = clock()
        self.ended = 0  # streams ended since the last thaw
        self.freezes = self.thaws = 0
        gc.callbacks.append(self._collected)

    def close(self) -> None:
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)

    def streams_ended(self, ended: int, still_open: int) -> None:
        """``ended`` streams have ended; ``still_open`` are open. Thaw once the streams ended
        since the last thaw outnumber the open ones (and ``THAW_MIN_ENDED``)."""
        self.ended += ended
        if self.ended > max(still_open, THAW_MIN_ENDED):
            self._thaw()

    def _collected(self, phase: str, info: dict) -> None:
        """A ``gc.callbacks`` hook: after a full collection, freeze what survived it (or, an
        hour after the last thaw, thaw instead)."""
        if phase != "stop" or info.get("generation") != 2:
            return
        if self._clock() - self.thawed_at > THAW_EVERY_S:
            self._thaw()  # (no logging here: the collector may run amid a log call)
            return
        gc.freeze()
        self.freezes += 1

    def _thaw(self) -> None:
        """Unfreeze: the next full collection walks everything, and freezes it again."""
        gc.unfreeze()
        self.thaws += 1
        self.ended = 0
        self.thawed_at = self._clock()
