"""compact over the dated landing layout, on a local folder and on the tests' S3 server: each
segment compacted exactly once; an earlier sink's root-level segments still compacted; a run
lists only the folders from the last one it consumed (a stray segment of already-compacted
frames in an earlier folder is never seen, where listing it would stop the run); and the
positions landing retention reads are in the run's figures."""

from __future__ import annotations

import pytest

from spark_jobs import runner
from spark_jobs.common import statuses as st
from spark_jobs.common.store import connect
from spark_jobs.warehouse.layout import Layout
from watch_service.store import runs

from ..support import unique
from . import places
from .builders import Stream, make_source, write_segment

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", params=places.STORAGES)
def landed(request, spark, pg_url, object_store, tmp_path_factory):
    a = unique("ly")
    make_source(pg_url, {a: {"seqs": list(range(1, 13))}})
    root = places.root(request.param, tmp_path_factory.mktemp("layout"))
    landing = places.join(root, "landing")
    s = Stream("c-" + a, {a: 0})
    for seqs in ([1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]):  # frames 1..6
        s.records(a, seqs)
    write_segment(landing, s, 0, 1)  # an earlier sink's, at the consumer's root
    write_segment(landing, s, 1, 2, folder="2026-01-01/23")
    write_segment(landing, s, 2, 3, folder="2026-01-02/00")
    work = places.join(root, "work")
    figures = [runner.run_steps(spark, Layout(landing, work, unique("ly")), pg_url, 2)]
    # Frames 1-2 again, in a folder before the last one consumed: listed, they would stop the
    # run ("overlaps frames already compacted").
    write_segment(landing, s, 0, 2, folder="2026-01-01/22")
    write_segment(landing, s, 3, 4, folder="2026-01-02/00")  # the last consumed folder
    write_segment(landing, s, 4, 6, folder="2026-01-02/01")
    for _ in range(2):  # the second finds nothing new
        figures.append(runner.run_steps(spark, Layout(landing, work, unique("ly")), pg_url, 2))
    layout = Layout(landing, work, "")
    with connect(pg_url) as conn:
        net = runs.cumulative_summary(conn, layout.catalog)
    return {"consumer": s.consumer, "a": a, "figures": figures, "net": net}


def test_each_segment_is_compacted_once(landed):
    c = landed["consumer"]
    compact = [f["compact"] for f in landed["figures"]]
    assert [(f["batch"], f["segments"], f["records"]) for f in compact] == [
        (1, 3, 6),
        (2, 2, 6),
        (None, 0, 0),
    ]
    assert [f["consumed"] for f in compact] == [{c: [1, 3]}, {c: [4, 6]}, {}]
    assert [f["through"] for f in compact] == [
        {c: [3, "2026-01-02/00"]},
        {c: [6, "2026-01-02/01"]},
        {c: [6, "2026-01-02/01"]},
    ]
    assert landed["net"] == {(c, landed["a"], st.DELIVERED): 12}
    assert all(f["verify"]["passed"] for f in landed["figures"])
