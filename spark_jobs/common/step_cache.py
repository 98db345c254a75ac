"""What a step caches is unpersisted when the step ends, however it ends.

A cached DataFrame belongs to the session's shared state, not to the step that cached it: until
someone unpersists it, its rows, its plan and the broadcasts its joins built stay in the driver.
The steps share long-lived sessions (the runner's one session for four steps and every later
run; the Spark Connect server's, whose cache all its clients share), so each run's leftovers
added up: after 30 small runs one session's old generation was full (1.0 of 1.3 GB, mostly
retained plans) and a run took four times as long as the first. The steps now cache through
:func:`cache`; their ``run`` is wrapped by :func:`releases_cache`, which unpersists all of it
on the way out, an exception (a killed step) included.

``step`` blocks may nest (the runner runs a step inside another's block only in tests); each
releases what was cached inside it. :func:`cache` outside any block is a programming error.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_HELD: ContextVar[list | None] = ContextVar("auditsync_held_frames", default=None)
F = TypeVar("F", bound=Callable[..., Any])


def cache(df: DataFrame) -> DataFrame:
    """``df.cache()``, unpersisted when the enclosing :func:`step` block ends."""
    held = _HELD.get()
    if held is None:
        raise RuntimeError("step_cache.cache() outside a step: nothing would unpersist it")
    df = df.cache()
    held.append(df)
    return df


@contextlib.contextmanager
def step() -> Iterator[None]:
    held: list = []
    token = _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(token)
        for df in reversed(held):
            df.unpersist()


def releases_cache(fn: F) -> F:
    """Run ``fn`` in a :func:`step` block."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with step():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
