"""How long a data interval may stay unverified, as an Airflow 3 deadline alert.

The promise: a data interval is verified within ``allowed`` of its end — by default three of
the schedule's periods (``AUDITSYNC_VERIFY_DEADLINE_S`` overrides it, in seconds). Airflow
measures deadlines from a reference; a data-interval run's logical date is its interval's start,
so the deadline is ``logical date + period + allowed``, which is exactly ``allowed`` after the
interval's end. A run that succeeds in time clears its deadline; one that has not, when the
deadline passes, has the executor call ``notifiers.deadline_missed`` with the alert channels.

:func:`schedule_period` and :func:`verify_deadline` are pure; :func:`dag_deadline` builds
the ``DeadlineAlert`` the DAG carries — except under ``airflow dags test``, which runs without a
scheduler (nothing would watch the deadline) and which, in Airflow 3.3.2, fails every
successful run of a DAG that carries one: its in-memory DAG holds the alert definitions where
``DagRun.update_state`` expects their database ids.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from croniter import croniter

DEADLINE_PERIODS = 3
SAMPLE_RUNS = 64  # fire times looked at to find a cron schedule's longest gap
CALLBACK = "auditsync_plugin.notifications.notifiers.deadline_missed"


def schedule_period(cron: str) -> timedelta:
    """The longest gap between two consecutive fire times of ``cron`` (a data interval's
    length; for irregular schedules, the longest one)."""
    it = croniter(cron, datetime(2025, 1, 1, tzinfo=UTC))
    times = [it.get_next(datetime) for _ in range(SAMPLE_RUNS)]
    return max(b - a for a, b in itertools.pairwise(times))


def verify_deadline(cron: str, override_s: str | None = None) -> tuple[timedelta, timedelta]:
    """(allowed after the interval's end, the deadline measured from the logical date)."""
    period = schedule_period(cron)
    if override_s:
        try:
            allowed = timedelta(seconds=float(override_s))
        except ValueError:
            raise ValueError(
                f"AUDITSYNC_VERIFY_DEADLINE_S: expected seconds, got {override_s!r}"
            ) from None
        if allowed.total_seconds() <= 0:
            raise ValueError(f"AUDITSYNC_VERIFY_DEADLINE_S: must be > 0, got {override_s!r}")
    else:
        allowed = DEADLINE_PERIODS * period
    return allowed, period + allowed


def deadline_alert(interval: timedelta, settings_kwargs: dict, name: str = "verified in time"):
    """The ``DeadlineAlert`` (from the logical date, ``interval`` later) that calls
    ``notifiers.deadline_missed`` through the executor."""
    from airflow.sdk.definitions.callback import SyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_LOGICAL_DATE,
        interval=interval,
        callback=SyncCallback(CALLBACK, kwargs={"settings": settings_kwargs}),
        name=name,
    )


def under_dags_test(argv: Sequence[str]) -> bool:
    """Whether this process is ``airflow dags test …`` (read from its arguments)."""
    return list(argv[1:3]) == ["dags", "test"]


def dag_deadline(interval: timedelta, settings_kwargs: dict, argv: Sequence[str] = sys.argv):
    """The DAG's deadline alert, or None under ``airflow dags test`` (see above)."""
    return None if under_dags_test(argv) else deadline_alert(interval, settings_kwargs)
