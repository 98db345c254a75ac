"""The Airflow CLI of one Airflow home, run from a fork server: a process that imported Airflow,
what a pipeline task imports (the home's ``[core] mp_forkserver_preload``, the list the
scheduler's own fork server preloads) and built ``dags test``'s in-process execution API once,
then forks a child for each command, which runs Airflow's own ``main`` with the command's
arguments, environment, folder and output files, as the ``airflow`` script would. What each
command does is Airflow's; what it no longer pays is the imports (about 6 CPU-s a command), the
execution API's versioned routes (2-4 CPU-s, built on its first request otherwise: Cadwyn's
``_cadwyn_initialize``, skipped should a Cadwyn lack it) and, with what was imported frozen
(``gc.freeze``), the collector's walks over it, at the command's exit too (3.9 CPU-s).

``CliServer`` is the test's end: ``run`` mirrors ``subprocess.run`` (a ``CompletedProcess``,
``TimeoutExpired`` after the timeout, the child killed). Run as a script, this file is the
server: one request a line on standard input (JSON: argv, env, cwd, out, err), answered on a
descriptor of its own with the child's pid, then its exit status. It serves only commands whose
environment agrees with its own in Airflow's configuration (``AIRFLOW_HOME``, ``AIRFLOW__*``),
which its imports read (``CliServer.serves``); ``AirflowHome.run`` runs any other as a process
of its own."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve()
BIN = Path(sys.executable).parent
PRELOAD_ENV = "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD"


def configuration(env: dict[str, str]) -> dict[str, str]:
    """What of an environment Airflow reads as its configuration when it is imported."""
    return {k: v for k, v in env.items() if k == "AIRFLOW_HOME" or k.startswith("AIRFLOW__")}


# -- the server ---------------------------------------------------------------------------------
def _preload() -> None:
    """Airflow's CLI, the modules a task imports, and ``dags test``'s in-process execution API
    with its versioned routes (Cadwyn builds them on the first request otherwise)."""
    import importlib

    import airflow.__main__  # noqa: F401
    from airflow.cli.commands import dag_command  # noqa: F401

    for name in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):
        with contextlib.suppress(ImportError):  # as Airflow's: an extra not installed
            importlib.import_module(name.strip())
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    app = in_process_api_server().app
    initialize = getattr(app, "_cadwyn_initialize", None)
    if callable(initialize) and not getattr(app, "_cadwyn_initialized", True):
        initialize()


def _child(request: dict) -> object:
    """In the forked child: become the command's process and run Airflow's ``main``."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Airflow's settings drop the ORM's pooled connections in a forked child themselves
    # (``os.register_at_fork``).
    sys.argv = [str(BIN / "airflow"), *request["argv"]]
    from airflow.__main__ import main

    return main()


def serve(requests: IO[str], answers: IO[str]) -> None:
    sys.path[0] = str(BIN)  # as the ``airflow`` script's own folder leads its path
    _preload()
    # What the imports made is kept out of the collector's sight: a child's collections (and its
    # exit's) would otherwise walk it all, writing to every page they touch.
    gc.freeze()
    import threading

    assert threading.active_count() == 1, f"no fork with threads: {threading.enumerate()}"
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            answers.close()
            # SystemExit unwinds to the interpreter's own exit: threads joined, atexit run.
            sys.exit(_child(request))
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"pid": pid, "status": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


# -- the test's end -----------------------------------------------------------------------------
class CliServer:
    """A fork server for ``airflow`` commands in ``env`` (an Airflow home's environment)."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env = env
        self.folder = folder
        self._log = open(folder / "cli-server.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=folder,
            text=True,
        )
        self._ready = False
        self._count = 0

    def _answer(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(
                f"the Airflow CLI server exited {self.proc.wait()}: "
                + (self.folder / "cli-server.log").read_text()[-3000:]
            )
        return json.loads(line)

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a command in ``env`` can run here: Airflow's configuration as imported."""
        return configuration(env) == configuration(self.env)

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess:
        """``airflow ARGV`` in ``env`` and ``cwd``, as ``subprocess.run(..., capture_output=True,
        text=True, timeout=timeout)`` would run it."""
        assert self.proc.stdin is not None
        if not self._ready:
            assert self._answer() == {"ready": True}
            self._ready = True
        self._count += 1
        out = self.folder / f"cli-{self._count}.out"
        err = self.folder / f"cli-{self._count}.err"
        request = {"argv": argv, "env": env, "cwd": str(cwd), "out": str(out), "err": str(err)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = self._answer()["pid"]
        status = self._wait(pid, timeout)
        stdout, stderr = (p.read_text(errors="replace") for p in (out, err))
        out.unlink()
        err.unlink()
        if status is None:
            raise subprocess.TimeoutExpired(["airflow", *argv], timeout, stdout, stderr)
        return subprocess.CompletedProcess(["airflow", *argv], status, stdout, stderr)

    def _wait(self, pid: int, timeout: float) -> int | None:
        """The child's exit status, or None once it was killed after ``timeout`` seconds."""
        import threading

        killed = threading.Event()

        def kill() -> None:
            killed.set()
            os.kill(pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            answer = self._answer()
        finally:
            timer.cancel()
        assert answer["pid"] == pid, answer
        return None if killed.is_set() else int(answer["status"])

    def stop(self) -> None:
        from ..support import stop

        if self.proc.stdin is not None:
            self.proc.stdin.close()
        stop(self.proc, 30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


if __name__ == "__main__":
    # Answers go on a descriptor of their own: what the imports print goes to the log.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, answers)
