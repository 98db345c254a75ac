"""The service's Prometheus metrics, on the official ``prometheus_client``.

Each app gets its own registry, so several apps in one process (the tests) never share series.
With ``serve --workers N`` every worker process writes its values into the directory named by
``PROMETHEUS_MULTIPROC_DIR`` (the supervisor creates it before the workers start) and
``/metrics`` on any worker renders the sum over all of them: gauges of live state (open streams,
pool connections) add up over the live workers, and the build info is one series.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST

# `*_created` series double every counter's exposition for a value nobody graphs.
prometheus_client.disable_created_metrics()

# Seconds. Appends and deliveries are expected in the 1-5 ms range (seed 002); the tail shows
# how far a bad minute strays from it.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def multiprocess_dir() -> str | None:
    """The shared directory of a multi-worker service, or None for one process."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


# In multiprocess mode every increment asks ``os.getpid()`` (a system call: nine per append
# request) whether the process was forked since. It changes only in a forked child, which the
# fork hook tells, so the values ask a copy instead (set before any metric is made).
if multiprocess_dir() is not None:
    _pid = [os.getpid()]
    os.register_at_fork(after_in_child=lambda: _pid.__setitem__(0, os.getpid()))
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: _pid[0])


def worker_exited(pid: int, shared: str | None = None) -> None:
    """Drop an ended worker's live gauges from the sum; the supervisor calls this per exit.
    Its counters stay: what it did still happened."""
    shared = shared or multiprocess_dir()
    if shared is not None:
        mark_process_dead(pid, shared)


def version() -> str:
    try:
        return metadata.version("auditsync")
    except metadata.PackageNotFoundError:  # running from a tree that was never installed
        return "0+unknown"


class Metrics:
    """Every series the service exposes; attributes are ``prometheus_client`` metrics."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.http_requests = Counter(
            "auditsync_http_requests",
            "HTTP requests by route, method and status",
            ("route", "method", "status"),
            registry=r,
        )
        self.http_duration = Histogram(
            "auditsync_http_request_duration_seconds",
            "time to the response head (streams: to their first byte), by route and method",
            ("route", "method"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # (route, method, status): the labelled series of ``http_requests`` and
        # ``http_duration``, found once rather than per request (``request_done``).
        self._request_series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self.appends = Counter("auditsync_appends", "append requests committed", registry=r)
        self.appends_relayed = Counter(
            "auditsync_appends_relayed",
            "append requests sent to the worker that owns their topic (serve --workers N)",
            registry=r,
        )
        self.connections_passed = Counter(
            "auditsync_connections_passed",
            "kept-alive connections passed to the worker that owns the topic they append to",
            registry=r,
        )
        self.records_appended = Counter(
            "auditsync_records_appended", "records appended", registry=r
        )
        self.append_duration = Histogram(
            "auditsync_append_duration_seconds",
            "one append request's database work, from validated body to commit",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.trimmed = Counter(
            "auditsync_retention_gaps", "gaps rows written by retention", ("reason",), registry=r
        )
        self.open_streams = Gauge(
            "auditsync_open_streams",
            "open SSE / watch streams",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.frames = Counter(
            "auditsync_frames_sent", "SSE frames sent, by event", ("event",), registry=r
        )
        # Frames are counted here first and added to ``frames`` per scrape and per sweep: a
        # labelled counter's increment (a lock, a label lookup) cost more than the write it
        # counted on the fan-out's hot path.
        self.frame_counts: dict[str, int] = {}
        self.delivery_lag = Histogram(
            "auditsync_delivery_lag_seconds",
            "a record's commit ($ts) to the tailer's push of its frame to the live watchers",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.pool_connections = Gauge(
            "auditsync_pool_connections",
            "PostgreSQL pool connections, by state (size, idle, waiting requests)",
            ("state",),
            multiprocess_mode="livesum",
            registry=r,
        )
        self.build_info = Gauge(
            "auditsync_build_info",
            "always 1; the labels say what is running",
            ("version", "python"),
            multiprocess_mode="max",
            registry=r,
        )
        self.build_info.labels(version(), platform.python_version()).set(1)
        self.tail_cache_limit_bytes = Gauge(
            "auditsync_tail_cache_limit_bytes",
            "bytes the tailers' record caches may hold together (AUDITSYNC_TAIL_CACHE_BYTES)",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.tail_cache_bytes = Gauge(
            "auditsync_tail_cache_bytes",
            "bytes the shared tailers' record caches hold",
            multiprocess_mode="livesum",
            registry=r,
        )

    def request_done(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request and observe its time to the response head."""
        key = (route, method, status)
        series = self._request_series.get(key)
        if series is None:
            series = self._request_series[key] = (
                self.http_requests.labels(route, method, str(status)),
                self.http_duration.labels(route, method),
            )
        series[0].inc()
        series[1].observe(seconds)

    def observe_pool(self, stats: dict[str, int]) -> None:
        """Copy ``AsyncConnectionPool.get_stats()`` into the pool gauges (called per scrape)."""
        self.pool_connections.labels("size").set(stats.get("pool_size", 0))
        self.pool_connections.labels("idle").set(stats.get("pool_available", 0))
        self.pool_connections.labels("waiting").set(stats.get("requests_waiting", 0))

    def frame_sent(self, event: str, n: int = 1) -> None:
        """Count ``n`` frames of ``event`` (cheap: a dict update; see ``flush_frames``)."""
        counts = self.frame_counts
        counts[event] = counts.get(event, 0) + n

    def flush_frames(self) -> None:
        """Add the frames counted since the last flush to ``auditsync_frames_sent``."""
        counts, self.frame_counts = self.frame_counts, {}
        for event, n in counts.items():
            self.frames.labels(event).inc(n)

    def render(self) -> bytes:
        """The exposition: this process's registry, or every worker's when there are several."""
        self.flush_frames()
        shared = multiprocess_dir()
        if shared is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=shared)
        return generate_latest(registry)
