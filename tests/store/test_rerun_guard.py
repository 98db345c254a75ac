"""A past run that later runs built on is not re-run (an operator's ``airflow backfill create``
of a past interval, a cleared old DAG run): its reconcile windows are seq ranges the later runs
continued from, so redoing it would judge their seqs twice or move the windows back. The run
tables say which runs came later (``runs.later_runs``, the one rule ``reconcile`` and the DAG's
``start_run`` both refuse by); a new run id, or the newest run again, is allowed."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import unique
from watch_service.store import runs

pytestmark = pytest.mark.pg


def test_only_runs_no_later_run_built_on_may_be_redone(pg_url):
    house, other = unique("wh"), unique("wh")
    first, second, third = (f"{house}-{n}" for n in ("a", "b", "c"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for batch, run_id in enumerate((first, second, third), 1):
            runs.commit_reconcile(
                conn, house, run_id, (batch, batch), False, [("c1", "t", 1, 1, batch, None)], []
            )
        runs.commit_reconcile(conn, other, f"{other}-x", (9, 9), False, [], [])
        assert runs.later_runs(conn, house, first) == [second, third]
        assert runs.later_runs(conn, house, second) == [third]
        assert runs.later_runs(conn, house, third) == []  # the newest: re-run freely
        assert runs.later_runs(conn, house, f"{house}-new") == []  # never reconciled
        assert runs.reconcile_state(conn, house, third)[0] == 2  # continues after batch 2
        with pytest.raises(ValueError) as refused:
            runs.reconcile_state(conn, house, first)
    assert str(refused.value) == (
        f"reconcile run {first} cannot be re-run: later runs built on it ({second}, {third}); "
        "its seqs are judged and the newest run continues from them, so there is nothing to "
        "backfill"
    )
    many = runs.rerun_refusal("r", ["a", "b", "c", "d", "e"])
    assert "(a, b, c and 2 more)" in many
