"""``auditsync spark-connect``: the long-running Spark Connect server the pipeline's steps use.

    auditsync spark-connect start|stop|status|url [--port 15002] [--master local[2]]
                                                  [--driver-memory 2g]
    auditsync spark-connect serve [--host 0.0.0.0] ...     (foreground, for containers)

A cold ``spark-submit`` costs 12–15 s of JVM start on a small machine, per step; a server
started once (ready in about 10 s) lets every step of every run connect in well under a second
(``sc://127.0.0.1:PORT``, see ``auditsync_plugin.operators.spark_step``). Like ``auditsync db``,
``start`` runs it in the background on loopback only, owned through a state file under
``<AUDITSYNC_HOME>/spark-connect/`` (pid, port, url), its log beside it; ``stop`` ends that pid
and nothing else. The PostgreSQL JDBC driver is put on its classpath from
``spark_jobs.common.session`` (``AUDITSYNC_JDBC_JAR`` first).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from watch_service.protocol.errors import AuditsyncError
from watch_service.settings import Settings, SettingsError

DEFAULT_PORT = 15002
DEFAULT_MASTER = "local[2]"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


class SparkConnectError(AuditsyncError):
    """The server could not be started or found; the message says why and where its log is."""


@dataclasses.dataclass(frozen=True)
class ServerState:
    pid: int
    port: int
    host: str

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"


def home(settings: Settings) -> Path:
    return Path(settings.local_dir) / "spark-connect"


def command(
    port: int,
    master: str = DEFAULT_MASTER,
    host: str = "127.0.0.1",
    driver_memory: str = "2g",
    python: str = sys.executable,
) -> list[str]:
    """The ``spark-submit`` that runs the server (pure, apart from finding the JDBC driver)."""
    from spark_jobs.common.session import BASE_CONF, submit_flags

    conf = {
        **BASE_CONF,
        "spark.ui.enabled": "false",
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": host,
    }
    return [
        str(Path(python).with_name("spark-submit")),
        "--class",
        SERVER_CLASS,
        "--master",
        master,
        "--driver-memory",
        driver_memory,
        *submit_flags(master=master, long_lived=True),
        *[x for key, value in conf.items() for x in ("--conf", f"{key}={value}")],
        "--name",
        "auditsync-spark-connect",
        "spark-internal",
    ]


def server_env(loopback: bool = True, python: str = sys.executable) -> dict[str, str]:
    """The server's environment; ``loopback`` keeps its driver on 127.0.0.1 (local runs; a
    server in a cluster must advertise its own hostname to the executors)."""
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    if loopback:
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs and is a Spark Connect server (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return SERVER_CLASS.encode() in cmdline


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a child not yet reaped is a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _accepts(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def read_state(settings: Settings) -> ServerState | None:
    """The running server this project started, or None (a stale state file is removed)."""
    path = home(settings) / "server.json"
    try:
        state = ServerState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if not _alive(state.pid):
        path.unlink(missing_ok=True)
        return None
    return state


def running_url(settings: Settings) -> str | None:
    state = read_state(settings)
    return state.url if state else None


def start(
    settings: Settings,
    port: int = DEFAULT_PORT,
    master: str = DEFAULT_MASTER,
    driver_memory: str = "2g",
    timeout_s: float | None = START_TIMEOUT_S,
) -> ServerState:
    """Start the server in the background unless it already runs, and wait until it accepts
    connections (``timeout_s=None``: return at once; :func:`wait_ready` later). Idempotent."""
    existing = read_state(settings)
    if existing:
        return existing
    folder = home(settings)
    folder.mkdir(parents=True, exist_ok=True)
    if _accepts("127.0.0.1", port):
        raise SparkConnectError(f"port {port} is taken by another process; pick --port")
    with open(folder / "server.log", "ab") as log:
        proc = subprocess.Popen(
            command(port, master, driver_memory=driver_memory),
            env=server_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=folder,
        )
    state = ServerState(proc.pid, port, "127.0.0.1")
    (folder / "server.json").write_text(json.dumps(dataclasses.asdict(state)))
    if timeout_s is not None:
        wait_ready(settings, state, timeout_s)
    return state


def wait_ready(
    settings: Settings, state: ServerState, timeout_s: float = START_TIMEOUT_S
) -> ServerState:
    """Until the server accepts connections; stops it and raises (with its log's tail) when
    it exits or does not come up within ``timeout_s``."""
    log_path = home(settings) / "server.log"
    deadline = time.monotonic() + timeout_s
    while not _accepts(state.host, state.port):
        if not _running(state.pid) or time.monotonic() > deadline:
            terminate(state.pid)
            (home(settings) / "server.json").unlink(missing_ok=True)
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
            raise SparkConnectError(
                f"the Spark Connect server did not come up on port "
                f"{state.port} (log {log_path}):\n{tail}"
            )
        time.sleep(0.2)  # a JVM's bind is only visible from outside as an open port
    return state


def terminate(pid: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM ``pid``, SIGKILL after ``timeout_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop(settings: Settings) -> bool:
    """Stop the server this project started; whether one was running."""
    state = read_state(settings)
    if state is None:
        return False
    terminate(state.pid)
    (home(settings) / "server.json").unlink(missing_ok=True)
    return True


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="auditsync spark-connect", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("action", choices=["start", "stop", "status", "url", "serve"])
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("AUDITSYNC_SPARK_CONNECT_PORT", DEFAULT_PORT)),
    )
    parser.add_argument(
        "--master", default=os.environ.get("AUDITSYNC_SPARK_MASTER", DEFAULT_MASTER)
    )
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--host", default="127.0.0.1", help="serve only: address to bind")
    return parser


def main(argv: list[str] | None = None) -> int:
    from watch_service import settings as settings_mod

    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.action == "serve":
        try:  # a missing jar or a malformed jar setting: one line, exit 2
            cmd = command(args.port, args.master, args.host, args.driver_memory)
        except AuditsyncError as exc:  # SettingsError and JarsMissing are
            print(f"auditsync spark-connect: {exc}", file=sys.stderr)
            return 2
        os.execvpe(cmd[0], cmd, server_env(loopback=args.host == "127.0.0.1"))
    try:
        settings = settings_mod.load()
        if args.action == "start":
            print(start(settings, args.port, args.master, args.driver_memory).url)
        elif args.action == "stop":
            print("stopped" if stop(settings) else "not running")
        elif args.action == "status":
            state = read_state(settings)
            print(f"running pid {state.pid} {state.url}" if state else "not running")
        else:
            url = running_url(settings)
            if url is None:
                print("not running", file=sys.stderr)
                return 1
            print(url)
    except (SettingsError, SparkConnectError) as exc:
        print(f"auditsync spark-connect: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
