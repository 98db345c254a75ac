"""``auditsync sink``: parse flags, open the consumer's landing (a folder or an ``s3://``
prefix), run the sink until SIGTERM/SIGINT (flush, persist the cursor, exit 0).

Exit codes: 0 stopped cleanly, 1 the server refused us for good (bad key, forbidden topic) or
the landing could not be written, 2 bad flags, an unsupported or unusable landing, or a
consumer another sink holds; each refusal is one line on stderr.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Mapping

import uvloop

from watch_service import logs
from watch_service import settings as settings_mod
from watch_service.settings import SettingsError
from watch_service.sink.config import (
    ConfigError,
    SinkConfig,
    build_parser,
    config_from_args,
)
from watch_service.sink.consumer import Sink
from watch_service.sink.landing import Landing, LandingError
from watch_service.sink.metrics import serving
from watch_service.storage import StorageError
from watch_service.store.database import database_url
from watch_service.store.search_index import SearchIndex

log = logging.getLogger("auditsync.sink")


async def run(cfg: SinkConfig, landing: Landing) -> int:
    """Run a sink on an opened landing folder until a signal stops it."""
    index = SearchIndex(cfg.index_url) if cfg.index_url else None
    sink = Sink(cfg, landing, index)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, sink.stop)
    try:
        async with serving(cfg.consumer, sink.stats, cfg.metrics_host, cfg.metrics_port) as port:
            if port:
                log.info("sink metrics on http://%s:%d/metrics", cfg.metrics_host, port)
            return await sink.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _error(text: str, log_format: str) -> None:
    print(logs.line(text, log_format, logger="auditsync.sink", level="ERROR"), file=sys.stderr)


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_format = "text"
    try:
        log_format = settings_mod.log_format(environ)
        logs.configure_command(log_format)
        settings = settings_mod.load(environ)
        cfg = config_from_args(args, settings.sink_key, lambda: database_url(settings), environ)
        landing = Landing(cfg.storage(), cfg.consumer, cfg.lock_url)
        landing.open()
    except (ConfigError, SettingsError, LandingError, StorageError, OSError) as exc:
        _error(f"auditsync sink: {exc}", log_format)
        return 2
    try:
        return uvloop.run(run(cfg, landing))
    except (LandingError, ConfigError) as exc:
        _error(f"auditsync sink: {exc}", log_format)
        return 2
    except OSError as exc:  # the landing cannot be written: stop; a restart resumes durably
        log.exception("landing write failed")
        _error(f"auditsync sink: cannot write the landing: {exc}", log_format)
        return 1
    finally:
        landing.close()
