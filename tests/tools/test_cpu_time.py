"""``watch_service.tools.cpu_time``, which ``make test`` runs pytest through: the command's exit
status passes through, and the CPU its process tree used is printed after it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from watch_service.tools.cpu_time import summary

pytestmark = pytest.mark.unit

LINE = re.compile(
    r"\[cpu-time\] wall (\d+\.\d) s, CPU (\d+\.\d) s \(user (\d+\.\d) s \+ sys (\d+\.\d) s\), "
    r"load average \d+\.\d\d \d+\.\d\d \d+\.\d\d"
)
# A child that spends about 0.3 s of CPU in a grandchild it waits for: the grandchild's CPU
# counts, as a JVM's does under a pytest worker.
BUSY = (
    "import subprocess, sys; "
    "subprocess.run([sys.executable, '-c', "
    "'import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass']); "
    "sys.exit(3)"
)


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "watch_service.tools.cpu_time", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_summary_line_names_wall_cpu_and_load():
    assert summary(61.25, 100.04, 20.0, (1.5, 2.25, 3.0)) == (
        "[cpu-time] wall 61.2 s, CPU 120.0 s (user 100.0 s + sys 20.0 s), "
        "load average 1.50 2.25 3.00"
    )


def test_the_exit_status_passes_through_and_the_children_cpu_is_counted():
    out = run("--", sys.executable, "-c", BUSY)
    assert out.returncode == 3
    match = LINE.fullmatch(out.stdout.strip())
    assert match is not None, out.stdout
    wall, cpu, user, system = (float(g) for g in match.groups())
    assert cpu >= 0.3
    # Each of the three figures is rounded to a tenth on its own: they agree within 0.1.
    assert user + system == pytest.approx(cpu, abs=0.1 + 1e-9)
    assert wall >= 0.3


def test_a_command_killed_by_a_signal_exits_128_plus_its_number():
    out = run("--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert out.returncode == 128 + 15
    assert LINE.fullmatch(out.stdout.strip()) is not None, out.stdout


def test_no_command_or_a_missing_one_is_a_clear_error():
    out = run()
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == "usage: python -m watch_service.tools.cpu_time -- COMMAND [ARG...]\n"
    out = run("--", "/nonexistent/command")
    assert (out.returncode, out.stdout) == (127, "")
    assert out.stderr == (
        "[cpu-time] cannot run '/nonexistent/command': No such file or directory\n"
    )
