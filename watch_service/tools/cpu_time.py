"""``python -m watch_service.tools.cpu_time -- COMMAND…``: run a command, then print its wall
time and the CPU-seconds it and its children used (user and system), and exit with its status.

``make test`` runs pytest through it, so every run of the suite prints what it cost the machine
(issue 36 asks for the figure beside the wall time). The CPU is what the kernel accounted to the
command's process tree once each process was waited for (``RUSAGE_CHILDREN``): pytest, its
xdist workers, and what they started and reaped (JVMs, Airflow, PostgreSQL servers). A daemon
that detaches from its parent is not counted.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

USAGE = "usage: python -m watch_service.tools.cpu_time -- COMMAND [ARG...]"


def summary(wall_s: float, user_s: float, sys_s: float, load: tuple[float, float, float]) -> str:
    """The line printed after the command: wall, CPU user + sys, and the load average."""
    return (
        f"[cpu-time] wall {wall_s:.1f} s, CPU {user_s + sys_s:.1f} s "
        f"(user {user_s:.1f} s + sys {sys_s:.1f} s), "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print(USAGE, file=sys.stderr)
        return 2
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(command)
    except OSError as exc:
        print(f"[cpu-time] cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    # Ctrl-C reaches the command too (one process group): it stops as it chooses to, and its
    # figures are still printed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    returncode = proc.wait()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = summary(
        wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, os.getloadavg()
    )
    print(line, flush=True)
    return returncode if returncode >= 0 else 128 - returncode  # killed by a signal: 128 + N


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
