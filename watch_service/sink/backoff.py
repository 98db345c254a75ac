"""Reconnect timing: exponential backoff from the server's ``retry:`` base, with jitter and a
cap, and the stream watchdog. Pure: the caller supplies the random draw.
"""

from __future__ import annotations

from watch_service.protocol.frames import RETRY_MS

__all__ = ["RETRY_MS", "backoff_ms", "watchdog_s"]  # RETRY_MS: the base until a ``retry:``


def backoff_ms(attempt: int, base_ms: int, cap_ms: int, draw: float) -> float:
    """Delay before reconnect number ``attempt`` (0 = the first after a healthy stream).

    ``base_ms * 2**attempt`` capped at ``cap_ms``, then "equal jitter": uniformly within
    [half, all] of it (``draw`` in [0, 1)), so many sinks dropped at once do not reconnect in
    lockstep, yet none retries sooner than half the server's requested pause.
    """
    if attempt < 0 or base_ms < 0 or cap_ms < 0 or not 0.0 <= draw < 1.0:
        raise ValueError(
            f"backoff_ms: bad arguments attempt={attempt} base_ms={base_ms} "
            f"cap_ms={cap_ms} draw={draw}"
        )
    ceiling = min(cap_ms, base_ms * 2 ** min(attempt, 32))
    return ceiling / 2 + ceiling / 2 * draw


def watchdog_s(heartbeat_ms: int, slack_ms: int) -> float:
    """Seconds of silence after which the stream is presumed dead: 2 × heartbeat + slack.

    The server clamps ``heartbeat_ms`` to [1000, 60000]; the watchdog uses the clamped value.
    """
    clamped = min(max(heartbeat_ms, 1000), 60_000)
    return (2 * clamped + slack_ms) / 1000
