"""The sink's own ``/metrics``: its counters and per-topic position, read from its
:class:`~watch_service.sink.progress.Stats` when scraped, so the hot path pays nothing.

Served on ``--metrics-port`` (off by default) by a small aiohttp app the sink command owns.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from watch_service.sink.config import ConfigError
from watch_service.sink.progress import Stats, lags

# (series name without _total, help, Stats attribute)
_COUNTERS = (
    ("auditsync_sink_frames", "frames received and spooled", "frames"),
    ("auditsync_sink_records", "records landed", "records"),
    (
        "auditsync_sink_duplicates",
        "records received again (at-least-once redelivery)",
        "duplicates",
    ),
    ("auditsync_sink_reconnects", "stream reconnects", "reconnects"),
    ("auditsync_sink_segments", "landing segments written", "segments"),
    ("auditsync_sink_rows", "landing rows written", "rows"),
    ("auditsync_sink_indexed_documents", "search index documents upserted", "indexed_docs"),
    ("auditsync_sink_index_errors", "search index upserts that failed", "index_errors"),
)


class SinkCollector(Collector):
    def __init__(self, consumer: str, stats: Stats) -> None:
        self.consumer, self.stats = consumer, stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.stats
        for name, help_text, attr in _COUNTERS:
            family = CounterMetricFamily(name, help_text, labels=("consumer",))
            family.add_metric((self.consumer,), getattr(s, attr))
            yield family
        cursor = GaugeMetricFamily(
            "auditsync_sink_cursor_seq",
            "the last seq durable in the landing, per topic",
            labels=("consumer", "topic"),
        )
        head = GaugeMetricFamily(
            "auditsync_sink_head_seq",
            "the topic's head_seq as last reported by the service",
            labels=("consumer", "topic"),
        )
        lag = GaugeMetricFamily(
            "auditsync_sink_lag_records",
            "head_seq minus the durable cursor, per topic (records not yet landed)",
            labels=("consumer", "topic"),
        )
        for topic, seq in sorted(s.cursors.items()):
            cursor.add_metric((self.consumer, topic), seq)
        for topic, seq in sorted(s.heads.items()):
            head.add_metric((self.consumer, topic), seq)
        for topic, behind in lags(s).items():
            lag.add_metric((self.consumer, topic), behind)
        yield from (cursor, head, lag)


def metrics_app(consumer: str, stats: Stats) -> web.Application:
    registry = CollectorRegistry()
    registry.register(SinkCollector(consumer, stats))

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


@contextlib.asynccontextmanager
async def serving(consumer: str, stats: Stats, host: str, port: int | None) -> AsyncIterator[int]:
    """Serve ``/metrics`` while the block runs; yields the bound port (0: not serving)."""
    if port is None:
        yield 0
        return
    runner = web.AppRunner(metrics_app(consumer, stats), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
