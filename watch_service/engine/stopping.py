"""Stopping the tasks a service owns, in bounded time even when a task loses its cancellation.

``task.cancel(); await task`` waits forever if the task swallows the ``CancelledError`` and
carries on. On Python 3.11 that happens without any fault of ours: ``asyncio.wait_for`` returns
the awaited result instead of raising when the cancellation arrives as the thing it waits for
completes (CPython gh-86296, bpo-42130; fixed in 3.12, where ``wait_for`` is built on
``asyncio.timeout``), and psycopg_pool waits for a pool connection with ``wait_for``
(``ACondition.wait_timeout``). A cursor flusher or GC pass cancelled as a connection is handed to
it gets the connection, does its round and goes back to sleep, still marked cancelling; the app's
cleanup awaited it for good (seen as ``InProcessService.stop()`` hanging until pytest-timeout).

``stop_tasks`` cancels, gives the tasks ``grace`` seconds to end (a task's own cleanup, such as
the flusher's last write, runs then), cancels whatever still runs again every ``RECANCEL_S``
until ``timeout``, and names what is left, if anything, in a warning rather than wait on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger("auditsync.tasks")
GRACE_S = 2.0  # a cancelled task's own cleanup: the time it has before it is cancelled again
RECANCEL_S = 0.5  # how often a task that lost its cancellation is cancelled again
TIMEOUT_S = 10.0  # the most stop_tasks waits in all


async def stop_tasks(
    tasks: Iterable[asyncio.Task],
    grace: float = GRACE_S,
    timeout: float = TIMEOUT_S,
) -> set[asyncio.Task]:
    """Cancel ``tasks`` and wait until they end, at most ``timeout`` seconds. Returns the tasks
    still running then (normally none). What a task raised is not re-raised: it has ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = {t for t in tasks if not t.done()}
    wait = grace
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            break
        done, pending = await asyncio.wait(pending, timeout=min(wait, left))
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: an error of a task being stopped is not news
        if pending and wait == grace:
            log.info(
                "cancelling again, %.1fs after the first time: %s",
                grace,
                ", ".join(sorted(t.get_name() for t in pending)),
            )
        wait = RECANCEL_S
    if pending:
        log.warning(
            "%d task(s) still running %.1fs after they were cancelled: %s",
            len(pending),
            timeout,
            ", ".join(sorted(t.get_name() for t in pending)),
        )
    return pending
