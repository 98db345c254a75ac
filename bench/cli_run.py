"""What one ``auditsync pipeline run`` costs as a user starts it: a cold process, its own JVM.

``bench/pipeline.py`` times the steps in one long-lived process whose JVM is already warm; a
user's (or cron's) ``auditsync pipeline run`` pays the interpreter, the imports, the JVM and the
Spark session each time. This bench times that whole process. Per repeat, on a fresh warehouse
and landing zone (its own embedded PostgreSQL, a local folder):

* one untimed run of ``--new`` records (the tables created, the JVM's first run on them);
* ``+new``: ``--new`` more records (default 2,000, four topics), one cold ``pipeline run``;
* ``+small``: ``--small`` more (default 300), another cold ``pipeline run``;
* with ``--history N``: a history of N records reconciled by an untimed run first, then the
  same ``+new`` run over it (the issue's ratio: over 1 M ≤ 1.1× over nothing).

Prints each run's wall and CPU-seconds (user + sys of the process and its JVM), the medians of
``--repeats``, and the load average before and after. Targets (issue 36): +2,000 ≤ 25 s, +300
≤ 20 s, +2,000 over 1 M ≤ 1.1× over nothing. Not a test: it reports, it does not assert.

``python bench/cli_run.py [--repeats 3] [--new 2000] [--small 300] [--history 1000000] [--quick]``
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import BIN, World, load  # noqa: E402 (bench/)

from watch_service.protocol.tlog.note import Signer  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import free_port  # noqa: E402

STEP_LINE = re.compile(r"^\[pipeline\] (\w+)\s+([\d.]+) s", re.MULTILINE)  # a step's seconds


class Runs:
    """Cold ``auditsync pipeline run`` processes on one world, each with a new run id."""

    made = 0  # run ids are unique across the worlds: they share the pipeline's run tables

    def __init__(self, world: World, work: Path) -> None:
        self.world, self.work = world, work

    def run(self) -> tuple[float, float]:
        """One ``pipeline run`` as its own process: (wall s, CPU-s of it and its children)."""
        Runs.made += 1
        run_id = f"20250101T{Runs.made // 60:02d}{Runs.made % 60:02d}00Z"
        command = [
            str(BIN / "auditsync"),
            "pipeline",
            "run",
            "--landing",
            self.world.landing,
            "--work",
            str(self.work),
            "--database-url",
            self.world.url,
            "--run-id",
            run_id,
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        reap_orphans()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            raise SystemExit(f"pipeline run {run_id} exited {done.returncode}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        steps = STEP_LINE.findall(done.stdout)
        print(f"  {run_id}: " + ", ".join(f"{step} {seconds} s" for step, seconds in steps))
        return wall, cpu


def reap_orphans(limit_s: float = 60.0) -> None:
    """Wait for the run's orphans (its JVM outlives the Python process by a moment), which this
    process adopts as a subreaper, so their CPU counts in ``RUSAGE_CHILDREN`` too."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # none left
        if pid == 0:
            time.sleep(0.05)  # one still running: a bounded poll, not a synchronisation


def repeat(base: Path, url: str, i: int, args: argparse.Namespace) -> dict[str, tuple]:
    """One repeat on a fresh world: the untimed first run, then the timed ones."""
    root = base / f"r{i}"
    world = World(url, str(root / "landing"), f"cli{i}")
    runs = Runs(world, root / "work")
    world.add(args.new)
    runs.run()
    figures: dict[str, tuple] = {}
    world.add(args.new)
    figures[f"+{args.new:,}"] = runs.run()
    world.add(args.small)
    figures[f"+{args.small:,}"] = runs.run()
    if args.history:
        world.add(args.history)
        runs.run()  # reconciles the history: untimed
        world.add(args.new)
        figures[f"+{args.new:,} over {args.history:,}"] = runs.run()
    for name, (wall, cpu) in figures.items():
        print(f"repeat {i + 1}: {name}: {wall:.1f} s wall, {cpu:.1f} CPU-s ({load()})", flush=True)
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new", type=int, default=2000)
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--history", type=int, default=0, help="e.g. 1000000")
    parser.add_argument("--quick", action="store_true", help="one repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop what was started
    os.environ["AUDITSYNC_LOG_SIGNING_KEY"] = str(Signer.generate("bench.auditsync/cli"))
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-cli-"))
    base.chmod(0o755)  # the embedded server runs as the postgres user
    pg = EmbeddedPostgres(base / "pg", free_port())
    print(f"bench/cli_run.py: {load()}", flush=True)
    results: list[dict[str, tuple]] = []
    try:
        pg.start()
        migrate(pg.url)
        # Adopt the runs' orphans (not the server above, already started): PR_SET_CHILD_SUBREAPER.
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
        for i in range(args.repeats):
            results.append(repeat(base, pg.url, i, args))
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(f"medians of {len(results)} (cold `auditsync pipeline run`), {load()}:")
    medians = {}
    for name in results[0]:
        walls = [r[name][0] for r in results]
        cpus = [r[name][1] for r in results]
        medians[name] = statistics.median(walls)
        print(f"  {name:<24} {medians[name]:6.1f} s wall  {statistics.median(cpus):6.1f} CPU-s")
    if args.history:
        over = medians[f"+{args.new:,} over {args.history:,}"] / medians[f"+{args.new:,}"]
        print(f"  over {args.history:,} / over nothing: {over:.2f}x (target ≤ 1.1)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
