"""What each work unit of the suite cost: wall seconds and the CPU-seconds of the worker's process
tree while it ran, printed at the end of a run as the units that cost most.

``--durations`` gives a test's wall time, which on two cores shared by three workers is mostly
waiting. The suite is CPU-bound, so the figure that says where its time goes is CPU. A unit's
CPU is read from ``/proc`` at its start and end: the worker, every live descendant (a Spark JVM,
an Airflow task, a service process), and what they reaped. A daemon that detached from the tree
(a PostgreSQL postmaster forked by ``pg_ctl``) is not counted.

Each worker appends one JSON line per unit to ``test-artifacts/unit-cost.jsonl``; the controller
empties it at the start and prints the table at the end.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")
_FILE_ENV = "AUDITSYNC_UNIT_COST_FILE"
_SHOWN = 25
_started = pytest.StashKey[dict]()  # the unit a worker is running: name, wall and CPU at start


def parse_stat(text: str) -> tuple[int, int]:
    """(parent pid, CPU ticks of the process and its reaped children) from a ``/proc/PID/stat``
    line. The command name may hold spaces and parentheses, so fields count from its last ``)``.
    Pure."""
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
    return int(fields[1]), sum(int(f) for f in fields[11:15])


def below(root: int, stats: dict[int, tuple[int, int]]) -> list[int]:
    """Every descendant of ``root`` in ``stats`` (pid → (ppid, ...)), parents before their
    children. Pure."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def tree_ticks(root: int, stats: dict[int, tuple[int, int]]) -> int:
    """CPU ticks of ``root`` and every descendant in ``stats`` (pid → (ppid, ticks)). Pure."""
    return sum(stats[pid][1] for pid in [root, *below(root, stats)] if pid in stats)


def proc_stats() -> dict[int, tuple[int, int]]:
    """Every process now: pid → (parent pid, CPU ticks), from ``/proc``."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = parse_stat(Path(entry.path, "stat").read_text())
            except (OSError, ValueError):
                continue  # gone between the listing and the read
    return stats


def _tree_cpu_s(root: int) -> float:
    return tree_ticks(root, proc_stats()) / _TICKS


def table(rows: list[dict], shown: int = _SHOWN) -> list[str]:
    """The summary lines: the costliest units by CPU-seconds, then the totals. Pure."""
    rows = sorted(rows, key=lambda r: r["cpu_s"], reverse=True)
    lines = [f"{'CPU-s':>8} {'wall s':>8}  unit"]
    lines += [f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['unit']}" for r in rows[:shown]]
    rest = rows[shown:]
    if rest:
        cpu, wall = sum(r["cpu_s"] for r in rest), sum(r["wall_s"] for r in rest)
        lines.append(f"{cpu:8.1f} {wall:8.1f}  the other {len(rest)} units")
    lines.append(f"{sum(r['cpu_s'] for r in rows):8.1f} {'':8}  all {len(rows)} units")
    return lines


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config) -> None:
    if _is_worker(config) or _FILE_ENV in os.environ:
        return
    path = Path(config.rootpath, "test-artifacts", "unit-cost.jsonl")
    path.parent.mkdir(exist_ok=True)
    path.write_text("")
    os.environ[_FILE_ENV] = str(path)  # the workers, started later, inherit it


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    from .conftest import work_unit

    state = item.config.stash.setdefault(_started, {})
    unit = work_unit(item.nodeid)
    if state.get("unit") != unit:
        state.update(unit=unit, wall=time.monotonic(), cpu=_tree_cpu_s(os.getpid()))
    yield
    if nextitem is None or work_unit(nextitem.nodeid) != unit:
        row = {
            "unit": unit,
            "wall_s": round(time.monotonic() - state["wall"], 1),
            "cpu_s": round(_tree_cpu_s(os.getpid()) - state["cpu"], 1),
        }
        state["unit"] = None
        path = os.environ.get(_FILE_ENV)
        if path:
            with open(path, "a") as out:
                out.write(json.dumps(row) + "\n")


def pytest_terminal_summary(terminalreporter, config) -> None:
    if _is_worker(config):
        return
    path = os.environ.get(_FILE_ENV)
    if not path or not Path(path).exists():
        return
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    if rows:
        terminalreporter.section("cost by work unit (CPU-s of the worker's process tree)")
        for line in table(rows):
            terminalreporter.write_line(line)
