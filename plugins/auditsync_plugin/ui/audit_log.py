"""The plugin's audit-log page: one topic of the warehouse's audit log as a reconciliation run
left it (Iceberg time travel, read with pyiceberg through ``spark_jobs.time_travel``: no JVM in
the API server), a page of rows at a time, each row linked to its proof (:func:`proof`: the
C2SP tlog-proof of the row in the signed log of the same run, read from the warehouse's tiles).

:func:`read` is the I/O: the run's snapshot from ``pipeline_runs``, the table from the catalog
in the same PostgreSQL, the rows. :class:`View` and :func:`render` are pure; the HTML is the
autoescaped Jinja template ``templates/audit_log.html``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from spark_jobs import time_travel
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.errors import AuditsyncError

from .templating import template

if TYPE_CHECKING:
    from watch_service.protocol.tlog import note

PAGE_ROWS = 50
DATA_WIDTH = 160


@dataclasses.dataclass(frozen=True)
class View:
    run: str
    topic: str
    after: int
    topics: list[str] = dataclasses.field(default_factory=list)
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    snapshot_id: int | None = None
    next_after: int | None = None
    error: str | None = None

    @property
    def heading(self) -> str:
        return f"as run {self.run} left it" if self.run else "now"

    def proof_link(self, seq: int) -> str:
        """The row's C2SP tlog-proof, in the signed log of the page's run (or the latest)."""
        query = {k: v for k, v in (("run", self.run), ("topic", self.topic)) if v}
        return "proof?" + urlencode({**query, "seq": str(seq)})

    def link(self, after: int) -> str:
        query = {k: v for k, v in (("run", self.run), ("topic", self.topic)) if v}
        return "audit-log?" + urlencode({**query, "after": str(after)})


def database_url(conninfo: Mapping[str, Any]) -> str:
    """The ``postgresql://`` URL of the plugin's connection fields (pure)."""
    user = quote(str(conninfo.get("user") or ""), safe="")
    if user and conninfo.get("password"):
        user += ":" + quote(str(conninfo["password"]), safe="")
    host = f"{conninfo['host']}:{conninfo.get('port') or 5432}"
    db = quote(str(conninfo.get("dbname") or "postgres"), safe="")
    return f"postgresql://{user + '@' if user else ''}{host}/{db}"


def read(conninfo: Mapping[str, Any], warehouse: str, run: str, topic: str, after: int) -> View:
    """The page's data (``TimeTravelError`` for an unknown run, another warehouse's run, an
    expired snapshot, a warehouse with no audit log)."""
    import psycopg

    layout = Layout("", warehouse, "")
    url = database_url(conninfo)
    as_of = time_travel.AsOf(run_id=run or None)
    with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
        target = time_travel.resolve(conn, layout, as_of)
    table = time_travel.load(layout, url)
    snapshot = time_travel.snapshot_of(table, target, f"the audit log {as_of.describe()}")
    topics = time_travel.topics(table, snapshot)
    chosen = topic or (topics[0] if topics else "")
    page = time_travel.read_page(table, snapshot, chosen, after, PAGE_ROWS)
    rows = [
        {
            "seq": r["seq"],
            "ts": time_travel.iso_ms(r["ts"]),
            "origin": r["origin"],
            "tag": r["tag"] or "",
            "data": time_travel.clip(r["data"], DATA_WIDTH),
        }
        for r in page.rows
    ]
    return View(run, chosen, after, topics, rows, snapshot, page.next_after)


class NoLogKey(AuditsyncError):
    """The proofs cannot be opened: no key is configured."""


def verifier_of(key: str | None) -> note.Verifier:
    """The verifier of ``key`` (the connection ``auditsync_log_key``'s password: a signing key
    or a verifier key), or ``NoLogKey`` saying why there is none."""
    from watch_service.protocol.tlog import note

    key = (key or "").strip()
    if not key:
        raise NoLogKey("no log key: set the Airflow connection auditsync_log_key's password")
    try:
        return (
            note.Signer.parse(key).verifier
            if key.startswith("PRIVATE+KEY+")
            else note.Verifier.parse(key)
        )
    except note.NoteError as exc:
        raise NoLogKey(f"the connection auditsync_log_key: {exc}") from None


def proof(warehouse: str, key: str | None, topic: str, seq: int, run: str | None) -> str:
    """The C2SP tlog-proof text of ``topic``'s ``seq`` in the signed log ``run`` signed (the
    latest when None; ``tlog_command.prove``); ``key``: a signing or verifier key."""
    from spark_jobs.tlog_command import prove
    from spark_jobs.tlog_store import TopicLog
    from watch_service.storage import Storage

    verifier = verifier_of(key)
    log = TopicLog.at(Storage(Layout("", warehouse, "").warehouse), topic, verifier)
    return prove(log, seq, run).text()


def render(view: View) -> str:
    return str(template("audit_log.html").render(view=view))
