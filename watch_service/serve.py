"""``auditsync serve --workers N``: N worker processes on one port, and their supervisor.

Each worker is its own interpreter running the whole app (``create_app``: its pool, its LISTEN
connection and tailers) on the one listening socket the supervisor bound and every worker
inherits: each accepts from it, so new connections go to whichever worker takes them first, and
no process outside the service can join the port (there is no ``SO_REUSEPORT``: a second
service on the port fails its start). Sessions live in PostgreSQL, so any worker serves any
stream.
Every response of a worker carries ``X-Auditsync-Worker: <index>`` so an operator (and the
tests) can see which worker answered; ``--workers 1`` runs the app in the one process, as
before. The gRPC surfaces (SpiceDB, Permify), when enabled, are served by worker 0 alone. A
topic's appends are committed by the worker that owns it (``engine/relay``), and a kept-alive
connection that appends to another worker's topic is passed to that worker
(``web/handoff``); the workers reach each other over Unix sockets in the supervisor's private
folder.

The supervisor (``supervise``):

* creates a fresh private folder for prometheus_client's multiprocess mode and passes it to
  the workers as ``PROMETHEUS_MULTIPROC_DIR`` in their environment, so it is set before they
  import anything; the folder is removed when the supervisor exits. This is the one place
  that variable is set (:func:`worker_environment`). No worker is ever replaced, so no dead
  worker's metric files need marking: they go with the folder.
* starts the workers and waits until each says its app (and gRPC servers) started, a line on
  a pipe; only then does the socket listen and every worker serve it (another line each way),
  so the port answers, and ``/readyz`` says ready, only once every surface accepts. A worker
  that exits or stays silent for ``START_TIMEOUT_S`` fails the start: the others are stopped
  and the supervisor exits 2.
* forwards SIGTERM and SIGINT to every worker (each shuts down gracefully: streams end with
  their terminal frame and store their cursors) and exits 0 once all have exited.
* restarts nothing: a worker that dies is logged with its exit status, the others are stopped
  gracefully, and the supervisor exits 1. A crash means a bug or an exhausted resource, and a
  silent restart would hide a crash loop; whatever runs the service (systemd, Kubernetes, a
  shell loop) restarts it whole, and clients resume their sessions from PostgreSQL.

Workers die with the supervisor (``PR_SET_PDEATHSIG``), so a ``kill -9`` of the supervisor
stops the whole service at once, as it would a single process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping

from watch_service.settings import Settings
from watch_service.web.listeners import http_unavailable
from watch_service.worker_handshake import (
    GO,
    LISTENING,
    STARTED,
    WorkerChannel,
    WorkerFds,
    read_line,
)

log = logging.getLogger("auditsync.serve")

START_TIMEOUT_S = 60.0
# Past the workers' own shutdown_timeout (5 s) before a worker that will not stop is killed.
STOP_TIMEOUT_S = 15.0
WORKER_HEADER = "X-Auditsync-Worker"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_PR_SET_PDEATHSIG = 1
LISTEN_BACKLOG = 1024


def all_listening(workers: int) -> str:
    """What the supervisor's log says once every worker listens (``ServiceProcess`` waits
    for it): listening on the port alone means only that one worker does."""
    return f"with {workers} workers (pids"


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def worker_environment(base: Mapping[str, str], metrics_dir: str) -> dict[str, str]:
    """The environment of every worker: the supervisor's, plus the multiprocess metrics folder."""
    return {**base, MULTIPROC_ENV: metrics_dir}


def worker_command(
    index: int, workers: int, ready_fd: int, go_fd: int, settings_file: str, listen_fd: int
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "watch_service.serve",
        f"--index={index}",
        f"--workers={workers}",
        f"--ready-fd={ready_fd}",
        f"--go-fd={go_fd}",
        f"--listen-fd={listen_fd}",
        f"--settings-file={settings_file}",
    ]


def share(total: int, index: int, workers: int) -> int:
    """Worker ``index``'s part of a service-wide budget: ``total // workers``, one more for the
    first ``total % workers`` workers, so the parts add up to ``total`` exactly."""
    return total // workers + (1 if index < total % workers else 0)


def worker_settings(settings: Settings, index: int, workers: int) -> Settings:
    """A worker's settings: the supervisor's, with the gRPC surfaces on worker 0 alone and the
    service-wide tail cache budget divided (``share``). ``max_streams`` stays whole: the
    workers count their streams together (``web.stream_slots``). ``pool_min``/``pool_max``
    stay whole too: they are per worker by definition (docs/operations.md, Configuration)."""
    tail = share(settings.tail_cache_bytes, index, workers)
    if index == 0:
        return dataclasses.replace(settings, tail_cache_bytes=tail)
    return dataclasses.replace(
        settings, grpc_port=None, permify_grpc_port=None, tail_cache_bytes=tail
    )


def _die_with_parent() -> None:
    """In the worker, between fork and exec: SIGKILL when the supervisor dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Supervisor:
    def __init__(
        self, workers: int, settings: Settings, settings_file: str, sock: socket.socket
    ) -> None:
        self.count, self.settings_file, self.sock = workers, settings_file, sock
        self.host, self.port = settings.host, settings.port
        self.procs: list[asyncio.subprocess.Process] = []
        self.stop_requested = asyncio.Event()

    async def run(self, env: Mapping[str, str]) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop_requested.set)
        try:
            if not await self._start(env):
                await self._stop_all()
                return 2
            log.info(
                "serving on http://%s:%d %s %s)",
                self.host,
                self.port,
                all_listening(self.count),
                ", ".join(str(p.pid) for p in self.procs),
            )
            return await self._watch()
        finally:
            self.sock.close()
            await self._stop_all()

    async def _start(self, env: Mapping[str, str]) -> bool:
        """Every worker started (its app, its gRPC servers), then the port listens, then every
        worker serves it: the port answers only once every surface does."""
        channels = [await self._spawn(index, env) for index in range(self.count)]
        try:
            if not await self._all_say(channels, STARTED):
                return False
            try:
                self.sock.listen(LISTEN_BACKLOG)
            except OSError as exc:
                raise http_unavailable(self.host, self.port, exc) from None
            for channel in channels:
                channel.go()
            if not await self._all_say(channels, LISTENING):
                return False
        finally:
            for channel in channels:
                channel.close()
        self.sock.close()  # the workers hold it: the port closes with the last of them
        return True

    async def _spawn(self, index: int, env: Mapping[str, str]) -> WorkerChannel:
        ready_read, ready_write = os.pipe()
        go_read, go_write = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *worker_command(
                    index, self.count, ready_write, go_read, self.settings_file, self.sock.fileno()
                ),
                env=dict(env),
                pass_fds=(ready_write, go_read, self.sock.fileno()),
                preexec_fn=_die_with_parent,
            )
        except BaseException:
            for fd in (ready_read, go_write):
                os.close(fd)
            raise
        finally:
            os.close(ready_write)
            os.close(go_read)
        self.procs.append(proc)
        return await WorkerChannel.open(ready_read, go_write)

    async def _all_say(self, channels: list[WorkerChannel], line: bytes) -> bool:
        """True once every worker has said ``line``; False (logged) when one exits first or
        they take longer than START_TIMEOUT_S together."""
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                said = await asyncio.gather(*(c.said(line) for c in channels))
        except TimeoutError:
            log.error("a worker did not start listening within %.0f s", START_TIMEOUT_S)
            return False
        failed = [i for i, ok in enumerate(said) if not ok]
        for index in failed:
            proc = self.procs[index]
            code = await proc.wait()
            log.error("worker %d (pid %d) exited with %s before listening", index, proc.pid, code)
        return not failed

    async def _watch(self) -> int:
        stopping = asyncio.create_task(self.stop_requested.wait())
        exits = {asyncio.create_task(p.wait()): i for i, p in enumerate(self.procs)}
        try:
            done, _ = await asyncio.wait([stopping, *exits], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [stopping, *exits]:
                task.cancel()
        if stopping in done:
            log.info("stopping %d workers", self.count)
            codes = await self._stop_all()
            return 0 if all(c == 0 for c in codes) else 1
        for task in done:
            index = exits[task]
            log.error(
                "worker %d (pid %d) exited with %s; stopping the others (no restart)",
                index,
                self.procs[index].pid,
                self.procs[index].returncode,
            )
        return 1

    async def _stop_all(self) -> list[int]:
        """SIGTERM to every worker still running, SIGKILL after STOP_TIMEOUT_S; exit codes."""
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                return list(await asyncio.gather(*(p.wait() for p in self.procs)))
        except TimeoutError:
            for proc in self.procs:
                if proc.returncode is None:
                    log.error(
                        "worker pid %d did not stop in %.0f s: killed", proc.pid, STOP_TIMEOUT_S
                    )
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            return list(await asyncio.gather(*(p.wait() for p in self.procs)))


def supervise(workers: int, settings: Settings, db_url: str, sock: socket.socket) -> int:
    """Run ``workers`` workers on ``sock`` (bound to the settings' host and port, not yet
    listening) until SIGTERM/SIGINT; the exit code. The workers inherit ``sock``, so no other
    process shares the port. They get the supervisor's Settings as resolved from its
    environment and flags (pickled into the private folder), so every flag reaches them."""
    shared = tempfile.mkdtemp(prefix="auditsync-serve-")  # mode 0700: private
    try:
        metrics_dir = os.path.join(shared, "metrics")
        os.mkdir(metrics_dir, 0o700)
        settings_file = os.path.join(shared, "settings.pickle")
        with open(settings_file, "wb") as out:
            pickle.dump((settings, db_url), out)
        env = worker_environment(os.environ, metrics_dir)
        return asyncio.run(Supervisor(workers, settings, settings_file, sock).run(env))
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# -- the worker ------------------------------------------------------------------------------
async def _worker(
    index: int,
    workers: int,
    fds: WorkerFds,
    settings: Settings,
    db_url: str,
    folder: str,
) -> None:
    from aiohttp import web

    from watch_service.app import create_app
    from watch_service.engine.relay import AppendRelay
    from watch_service.web.app_keys import APPENDER, HANDOFF, METRICS, STREAM_SLOTS
    from watch_service.web.handoff import ConnectionHandoff
    from watch_service.web.serving import serve
    from watch_service.web.stream_slots import SharedStreamSlots

    app = create_app(settings, db_url)
    handoff = app[HANDOFF] = ConnectionHandoff(index, folder)
    # AUDITSYNC_MAX_STREAMS counts the streams of every worker (web/stream_slots.py)
    app[STREAM_SLOTS] = SharedStreamSlots(settings.max_streams, folder, index, workers)

    async def relay_ctx(app: web.Application) -> AsyncIterator[None]:
        # Appends go to each topic's owner worker (engine/relay.py), and so do the kept-alive
        # connections that append to it (web/handoff.py), over the private folder.
        relay = AppendRelay(app[APPENDER], index, workers, folder)
        relay.on_forward = app[METRICS].appends_relayed.inc
        handoff.on_sent = app[METRICS].connections_passed.inc
        await relay.start()
        handoff.start()
        app[APPENDER].relay = relay
        yield
        app[APPENDER].relay = None
        await handoff.aclose()
        await relay.aclose()
        app[STREAM_SLOTS].close()

    async def name_worker(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers[WORKER_HEADER] = str(index)

    async def started() -> bool:
        os.write(fds.ready, STARTED)
        return await read_line(fds.go) == GO

    def listening() -> None:
        os.write(fds.ready, LISTENING)
        os.close(fds.ready)

    app.on_response_prepare.append(name_worker)
    app.cleanup_ctx.append(relay_ctx)
    sock = socket.socket(fileno=fds.listen)
    await serve(app, settings, sock=sock, on_started=started, on_listening=listening)


def worker_main(argv: list[str] | None = None) -> int:
    import uvloop

    from watch_service import logs

    parser = argparse.ArgumentParser(prog="auditsync-worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--go-fd", type=int, required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--settings-file", required=True)
    args = parser.parse_args(argv)
    with open(args.settings_file, "rb") as f:  # written by our own supervisor, mode 0700
        settings, db_url = pickle.load(f)
    logs.configure(settings.log_format, worker=args.index)
    settings = worker_settings(settings, args.index, args.workers)
    folder = os.path.dirname(args.settings_file)  # the supervisor's private folder
    fds = WorkerFds(args.ready_fd, args.go_fd, args.listen_fd)
    uvloop.run(_worker(args.index, args.workers, fds, settings, db_url, folder))
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
