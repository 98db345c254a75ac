"""The tests' own stopper (``tests.support.stop_all``) ends whatever a stopped process leaves
running below it: a child that ignores SIGTERM and that child's own child, killed after the
grace and reaped, not left to outlive the test run (as an Airflow scheduler's fork server
once did)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests import support

# A parent that starts a child ignoring SIGTERM, which starts a grandchild (sleep); the parent
# prints both pids and waits.
TREE = """
import subprocess, sys, time
kid = subprocess.Popen(
    [sys.executable, "-c",
     "import signal, subprocess, time\\n"
     "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
     "g = subprocess.Popen(['sleep', '300'])\\n"
     "print(g.pid, flush=True)\\n"
     "time.sleep(300)\\n"],
    stdout=subprocess.PIPE, text=True)
grandchild = kid.stdout.readline().strip()
print(kid.pid, grandchild, flush=True)
time.sleep(300)
"""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_stopped_process_leaves_nothing_running_below_it(monkeypatch):
    monkeypatch.setattr(support, "ORPHAN_GRACE_S", 0.5)
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    kid, grandchild = (int(p) for p in proc.stdout.readline().split())
    assert sorted(support.descendants(proc.pid)) == sorted([kid, grandchild])

    started = time.monotonic()
    assert support.stop_all([proc], timeout=30) == [-signal.SIGTERM]
    took = time.monotonic() - started

    # Both were adopted by this process once their parents went, killed and reaped: no
    # zombie, nothing running.
    assert gone(kid) and gone(grandchild)
    assert took < 5, took
    proc.stdout.close()
