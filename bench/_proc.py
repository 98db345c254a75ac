"""What the benchmarks read of a process from ``/proc``: CPU seconds, wake-ups and resident
memory, of a process alone or with its children (a supervisor's workers, a postmaster's
backends). CPU time rather than wall time: robust to a busy machine."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after ``comm``: [1] the parent, [11] and [12] utime and
    stime in ticks; [] when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used (every thread), 0 when it is gone."""
    fields = stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICK if fields else 0.0


def tree(pid: int) -> list[int]:
    """``pid`` and its live children."""
    return [pid] + [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and (f := stat(int(e))) and int(f[1]) == pid
    ]


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children."""
    return sum(cpu_s(p) for p in tree(pid))


def wakeups(pid: int) -> int:
    """Times ``pid`` (every thread) went to sleep and was woken: its voluntary context
    switches. An event loop sleeps when it has nothing to do, so each one is a wake-up; 0 when
    the process is gone."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    except OSError:
        pass
    return total


def tree_wakeups(pid: int) -> int:
    """Wake-ups of ``pid`` and its live children."""
    return sum(wakeups(p) for p in tree(pid))


def tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its live children, MiB."""
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024
