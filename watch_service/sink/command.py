"""``auditsync sink``: parse flags, open the consumer's landing folder, run the sink until
SIGTERM/SIGINT (flush, persist the cursor, exit 0).

Exit codes: 0 stopped cleanly, 1 the server refused us for good (bad key, forbidden topic) or
the landing could not be written, 2 bad flags or an unusable landing folder.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Mapping

import uvloop

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


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = settings_mod.load(environ)
        default_index = None
        if not args.no_index and not args.database_url:
            default_index = database_url(settings)
        cfg = config_from_args(args, settings.sink_key, default_index)
        landing = Landing(cfg.landing, cfg.consumer)
        landing.open()
    except (ConfigError, SettingsError, LandingError, OSError) as exc:
        print(f"auditsync sink: {exc}", file=sys.stderr)
        return 2
    try:
        return uvloop.run(run(cfg, landing))
    except (LandingError, ConfigError) as exc:
        print(f"auditsync sink: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the landing cannot be written: stop; a restart resumes durably
        log.exception("landing write failed")
        print(f"auditsync sink: cannot write the landing: {exc}", file=sys.stderr)
        return 1
    finally:
        landing.close()
