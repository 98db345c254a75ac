"""The sink's flags and its one frozen configuration object.

``build_parser`` defines ``auditsync sink``'s flags; ``config_from_args`` validates them into a
:class:`SinkConfig`, failing with the flag's name in the message. ``--landing`` is parsed by
``watch_service.storage`` (a path, ``file://…`` or ``s3://bucket/prefix``; anything else is
refused before anything is created).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Mapping

from watch_service.protocol.errors import ApiError, AuditsyncError
from watch_service.protocol.names import TOPIC_RE, check_node
from watch_service.sink.faults import FaultPolicy
from watch_service.storage import Location, S3Config, Storage, StorageError

KEY_ENV = "AUDITSYNC_SINK_KEY"
_CONSUMER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class ConfigError(AuditsyncError):
    """A flag is missing or malformed; the message names it."""


@dataclasses.dataclass(frozen=True)
class SinkConfig:
    url: str
    topics: tuple[str, ...]
    consumer: str
    landing: Location
    node: str | None = None
    from_seq: int = 0
    tail: bool = False
    key: str | None = None
    heartbeat_ms: int = 15_000
    watchdog_slack_ms: int = 5_000
    flush_rows: int = 5_000
    flush_ms: int = 500
    progress_s: float = 5.0
    backoff_cap_ms: int = 30_000
    index_url: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # None: no /metrics
    faults: FaultPolicy = dataclasses.field(default_factory=FaultPolicy)
    s3: S3Config | None = None  # None: from the AWS variables, if the landing is on S3
    lock_url: str | None = None  # the PostgreSQL holding an object-store consumer's lock

    @property
    def consumer_dir(self) -> Location:
        return self.landing.join(self.consumer)

    def storage(self) -> Storage:
        """The landing zone root and its filesystem."""
        return Storage(self.landing, self.s3)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The ``auditsync sink`` flags, on ``parser`` (e.g. a subcommand's) or a new parser."""
    p = parser or argparse.ArgumentParser(
        prog="auditsync sink",
        description="Subscribe to topics over SSE and keep the landing "
        "zone and the search index in sync. The bearer key comes from " + KEY_ENV + ".",
    )
    p.add_argument("--url", required=True, help="the watch service, e.g. http://127.0.0.1:8400")
    p.add_argument("--topics", required=True, help="comma-separated topic names")
    p.add_argument("--consumer", required=True, help="this sink's name: <landing>/<consumer>/")
    p.add_argument(
        "--landing",
        required=True,
        help="landing zone root: a folder, file:///path or s3://bucket/prefix "
        "(S3 credentials and endpoint from the AWS_* variables)",
    )
    p.add_argument("--node", help="node filter: never receive records written by this node")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-seq",
        type=int,
        default=0,
        help="first session only: deliver seqs above this (default 0: all)",
    )
    start.add_argument(
        "--tail", action="store_true", help="first session only: start at each topic's current head"
    )
    p.add_argument("--heartbeat-ms", type=int, default=15_000)
    p.add_argument(
        "--watchdog-slack-ms", type=int, default=5_000, help="watchdog = 2 x heartbeat + this"
    )
    p.add_argument("--flush-rows", type=int, default=5_000, help="rows per segment, at most")
    p.add_argument("--flush-ms", type=int, default=500, help="oldest buffered frame age, at most")
    p.add_argument("--progress-s", type=float, default=5.0, help="progress log interval")
    p.add_argument("--backoff-cap-ms", type=int, default=30_000)
    p.add_argument(
        "--database-url",
        help="the sink's PostgreSQL: the search index and, for an s3:// landing, the consumer "
        "lock (default: the service's DATABASE_URL or the embedded cluster)",
    )
    p.add_argument("--no-index", action="store_true", help="do not keep a search index")
    p.add_argument(
        "--fault-drop-fraction",
        type=float,
        default=0.0,
        help="TESTS/DEMOS ONLY: silently drop this fraction of records",
    )
    p.add_argument(
        "--fault-corrupt",
        type=int,
        default=0,
        help="TESTS/DEMOS ONLY: corrupt this many record payloads",
    )
    p.add_argument("--fault-seed", type=int, default=0)
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve this sink's Prometheus /metrics on this port (default: off; 0 = any free port)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address for --metrics-port (default: %(default)s)",
    )
    return p


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"--{name}: must be > 0, got {value!r}")


def config_from_args(
    args: argparse.Namespace,
    key: str | None,
    default_database_url: Callable[[], str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SinkConfig:
    """``default_database_url``: called only when a database is needed and not flagged;
    ``environ``: where an S3 landing's AWS variables are read (default ``os.environ``)."""
    try:
        landing = Location.parse(args.landing)
        s3 = None if landing.is_local else S3Config.from_env(environ)
    except StorageError as exc:
        raise ConfigError(f"--landing: {exc}") from None
    if not re.fullmatch(r"https?://[^/\s]+/?", args.url):
        raise ConfigError(f"--url: expected http(s)://host:port, got {args.url!r}")
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    if not topics:
        raise ConfigError("--topics: name at least one topic")
    for t in topics:
        if not TOPIC_RE.fullmatch(t):
            raise ConfigError(f"--topics: {t!r} is not a valid topic name")
    if len(set(topics)) != len(topics):
        raise ConfigError(f"--topics: a topic is named twice in {args.topics!r}")
    if not _CONSUMER_RE.fullmatch(args.consumer):
        raise ConfigError(
            f"--consumer: {args.consumer!r} must be 1-128 of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    if args.node is not None:
        try:
            check_node(args.node, "--node")
        except ApiError as exc:
            raise ConfigError(exc.message) from None
    if args.from_seq < 0:
        raise ConfigError(f"--from-seq: must be >= 0, got {args.from_seq}")
    for name in ("heartbeat_ms", "flush_rows", "flush_ms", "progress_s", "backoff_cap_ms"):
        _positive(name.replace("_", "-"), getattr(args, name))
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port: must be 0-65535, got {args.metrics_port}")
    if args.watchdog_slack_ms < 0:
        raise ConfigError(f"--watchdog-slack-ms: must be >= 0, got {args.watchdog_slack_ms}")
    try:
        faults = FaultPolicy(args.fault_drop_fraction, args.fault_corrupt, args.fault_seed)
    except ValueError as exc:
        raise ConfigError(f"--fault-*: {exc}") from None
    database = args.database_url
    if database is None and (not args.no_index or not landing.is_local):
        database = default_database_url() if default_database_url is not None else None
    if not landing.is_local and not database:
        raise ConfigError(
            f"--landing {landing.uri}: an object store has no file locks; the sink locks its "
            "consumer in PostgreSQL: give --database-url or set DATABASE_URL"
        )
    return SinkConfig(
        url=args.url.rstrip("/"),
        topics=topics,
        consumer=args.consumer,
        landing=landing,
        s3=s3,
        lock_url=None if landing.is_local else database,
        node=args.node,
        from_seq=args.from_seq,
        tail=args.tail,
        key=key or None,
        heartbeat_ms=args.heartbeat_ms,
        watchdog_slack_ms=args.watchdog_slack_ms,
        flush_rows=args.flush_rows,
        flush_ms=args.flush_ms,
        progress_s=args.progress_s,
        backoff_cap_ms=args.backoff_cap_ms,
        index_url=None if args.no_index else database,
        faults=faults,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
    )
