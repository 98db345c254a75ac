"""Two commits side by side: the watch and pipeline benchmarks, same session, same machine.

Run it before landing a change to the engine, the web layer, the serving code or the pipeline
steps (docs/benchmarks.md). It is a benchmark, not a test: it prints, it does not assert.

``python bench/compare.py BASE [HEAD] [--benches watch,pipeline] [--repeats 3] [--budget-min 90]
[--keep-logs DIR]``

* Each commit is checked out with ``git worktree add --detach`` into one temp folder, sharing
  this checkout's ``.venv`` (this interpreter) and ``.local`` (the pinned jars).
* The measuring harness is the same for both: this checkout's ``bench/`` is copied over each
  worktree's (``--harness own`` keeps each commit's own), so only the code under test differs.
  Each benchmark imports the worktree's packages (``PYTHONPATH``), and the service it starts
  runs from the worktree.
* Runs are interleaved (base, head, head, base, …: a drift in the machine's load falls on both
  alike), each bounded by its own timeout and all by ``--budget-min``: a run that would start
  past the budget is skipped and said so. A run over its timeout gets SIGTERM (each benchmark
  stops what it started), then SIGKILL.
* Printed: each run's load average before and after, then per figure the median of each
  commit's runs and head / base. The watch benchmark's own ratio to its relay floor, measured
  in the same run, is the figure to trust on a busy machine (the floor feels the same load).
* On exit (also on Ctrl-C or SIGTERM) the worktrees and the temp folder are removed; each
  run's log (per-step lines, load) is copied first into ``--keep-logs`` when given.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
# What each benchmark is run with, and how long one run may take.
BENCHES: dict[str, tuple[list[str], float]] = {
    "watch": (["watch.py", "--levels", "1,100,1000,10000", "--rows-only"], 360),
    "pipeline": (["pipeline.py", "--sizes", "0", "--skip-dag", "--storages", "file"], 900),
}
# Figures the watch benchmark's --json gives that the comparison shows (lower is better).
WATCH_FIGURES = (
    "p50",
    "p99",
    "us_per_delivery",
    "us_per_append",
    "wakeups_per_append",
    "cpu_pct",
    "client_us_per_delivery",
    "pg_us_per_append",
)
PIPELINE_RUN = re.compile(r"^\+[\d,]+ over\s+([\d,]+): (.*?)\s*\(load", re.M)
STEP = re.compile(r"(\w+)\s+([\d.]+)")
DAG_RUN = re.compile(r"^empty DAG run \(([\w-]+)\): ([\d.]+) s", re.M)


# -- pure: figures and the table ---------------------------------------------------------------
def watch_figures(doc: Mapping[str, float]) -> dict[str, float]:
    """The figures of one ``bench/watch.py --json`` document: the service's, and its ratio to
    the floor of the same run (``svc/floor``) for p50, p99, CPU per delivered record and
    wake-ups per appended record."""
    out: dict[str, float] = {}
    for key, value in doc.items():
        parts = key.split()
        if len(parts) != 3 or parts[0] != "service" or parts[2] not in WATCH_FIGURES:
            continue
        _, n, figure = parts
        out[f"watch {n} {figure}"] = value
        floor = doc.get(f"floor {n} {figure}")
        if figure in ("p50", "p99", "us_per_delivery", "wakeups_per_append") and floor:
            out[f"watch {n} {figure} svc/floor"] = value / floor
    return out


def pipeline_figures(text: str) -> dict[str, float]:
    """Per-step seconds of each timed run in ``bench/pipeline.py``'s output, and its empty DAG
    runs (the last one of each mode)."""
    out: dict[str, float] = {}
    for size, steps in PIPELINE_RUN.findall(text):
        for step, seconds in STEP.findall(steps):
            out[f"pipeline +new over {size} {step} s"] = float(seconds)
    for mode, seconds in DAG_RUN.findall(text):
        out[f"pipeline empty DAG {mode} s"] = float(seconds)
    return out


def ratio_table(base: Mapping[str, Sequence[float]], head: Mapping[str, Sequence[float]]) -> str:
    """One line per figure either commit has: the median of each commit's runs (with how many)
    and head / base (below 1: head is lower, which for every figure here is better)."""
    lines = [f"{'figure':<44} {'base':>12} {'head':>12} {'head/base':>9}"]
    for name in sorted(set(base) | set(head)):
        b, h = _median(base.get(name, ())), _median(head.get(name, ()))
        ratio = h[0] / b[0] if b[1] and h[1] and b[0] else math.nan
        lines.append(
            f"{name:<44} {_cell(b):>12} {_cell(h):>12} "
            f"{'-' if math.isnan(ratio) else f'{ratio:.2f}':>9}"
        )
    return "\n".join(lines)


def _median(values: Sequence[float]) -> tuple[float, int]:
    finite = [v for v in values if not math.isnan(v)]
    return (statistics.median(finite), len(finite)) if finite else (math.nan, 0)


def _cell(m: tuple[float, int]) -> str:
    value, n = m
    return "-" if not n else f"{value:.3g} ({n})"


def schedule(repeats: int) -> list[str]:
    """The order of the runs: base, head, then head, base, … (each pair mirrors the last)."""
    order: list[str] = []
    for i in range(repeats):
        order += ["base", "head"] if i % 2 == 0 else ["head", "base"]
    return order


# -- the I/O shell -------------------------------------------------------------------------------
def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def checkout(commit: str, where: Path, harness: str) -> Path:
    git("worktree", "add", "--detach", str(where), commit)
    for shared in (".venv", ".local"):
        if (ROOT / shared).exists() and not (where / shared).exists():
            (where / shared).symlink_to(ROOT / shared)
    if harness == "this":
        for path in HERE.glob("*.py"):
            shutil.copy2(path, where / "bench" / path.name)
    return where


def run_one(tree: Path, bench: str, timeout: float, out_dir: Path, tag: str) -> dict[str, float]:
    """One benchmark run in ``tree``; its figures ({} if it failed: the log says why)."""
    args, _ = BENCHES[bench]
    json_path = out_dir / f"{tag}.json"
    extra = ["--json", str(json_path)] if bench == "watch" else []
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    log_path = out_dir / f"{tag}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(tree / "bench" / args[0]), *args[1:], *extra],
            cwd=tree,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: ``stop`` ends what it left running too
        )
        code: int | str
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = stop(proc)
            print(f"  {tag}: over its {timeout:.0f} s: stopped", flush=True)
        except BaseException:
            stop(proc)
            raise
    text = log_path.read_text(errors="replace")
    if code != 0:
        print(f"  {tag}: exit {code}; the end of its log:", flush=True)
        print("    " + "\n    ".join(text.strip().splitlines()[-8:]), flush=True)
        return {}
    if bench == "watch":
        return watch_figures(json.loads(json_path.read_text()))
    return pipeline_figures(text)


def stop(proc: subprocess.Popen) -> int | str:
    """SIGTERM (the benchmark stops what it started), then whatever its group still holds: a
    benchmark killed mid-run leaves a Spark JVM, which would load every run after it."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(proc.pid, sig)  # the group outlives its leader while a member runs
        except ProcessLookupError:
            break
        time.sleep(grace)
    return "stopped"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit to compare against (e.g. origin/main, a hash)")
    parser.add_argument("head", nargs="?", default="HEAD", help="the commit to measure")
    parser.add_argument("--benches", default="watch,pipeline", help="of: watch, pipeline")
    parser.add_argument("--repeats", type=int, default=3, help="runs per commit (medians)")
    parser.add_argument("--budget-min", type=float, default=90, help="no run starts after this")
    parser.add_argument("--harness", choices=("this", "own"), default="this")
    parser.add_argument(
        "--keep-logs",
        type=Path,
        help="a folder to copy each run's log (and the watch runs' JSON) into before the "
        "checkouts are removed",
    )
    parser.add_argument("--watch-levels", help="bench/watch.py --levels (default: all rows)")
    parser.add_argument(
        "--pipeline-args",
        help="bench/pipeline.py's arguments instead of the default "
        f"{shlex.join(BENCHES['pipeline'][0][1:])!r} (e.g. '--sizes 0,1000000 --dag-runs 1')",
    )
    args = parser.parse_args(argv)
    benches = [b for b in args.benches.split(",") if b]
    unknown = set(benches) - set(BENCHES)
    if unknown or not benches:
        parser.error(f"--benches {args.benches!r}: each one of {', '.join(BENCHES)}")
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    if args.watch_levels:
        BENCHES["watch"][0][2] = args.watch_levels
    if args.pipeline_args is not None:
        BENCHES["pipeline"] = (["pipeline.py", *shlex.split(args.pipeline_args)], 1800)
    commits = {}
    for name in ("base", "head"):
        ref = getattr(args, name)
        try:
            commits[name] = git("rev-parse", "--verify", f"{ref}^{{commit}}")
        except subprocess.CalledProcessError:
            parser.error(f"{name} {ref!r}: not a commit of this repository")
    # SIGTERM unwinds like Ctrl-C, so the finally below removes what this run made.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="auditsync-compare-"))
    tmp.chmod(0o755)  # the benchmarks' embedded PostgreSQL runs as the postgres user
    trees: dict[str, Path] = {}
    figures: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    deadline = time.monotonic() + args.budget_min * 60
    try:
        for name, sha in commits.items():
            trees[name] = checkout(sha, tmp / name, args.harness)
            print(f"{name}: {sha[:12]} {git('log', '-1', '--format=%s', sha)[:70]}", flush=True)
        print(f"harness: {'this checkout' if args.harness == 'this' else 'each commit'}'s bench/")
        for bench in benches:
            timeout = BENCHES[bench][1]
            for i, name in enumerate(schedule(args.repeats)):
                left = deadline - time.monotonic()
                tag = f"{bench}-{name}-{i}"
                if left < timeout / 3:
                    print(f"  {tag}: skipped (the budget has {left:.0f} s left)", flush=True)
                    continue
                before, started = load(), time.monotonic()
                got = run_one(trees[name], bench, min(timeout, left), tmp, tag)
                print(
                    f"  {tag}: {time.monotonic() - started:.0f} s, {len(got)} figures "
                    f"({before} before, {load()} after)",
                    flush=True,
                )
                for key, value in got.items():
                    figures[name].setdefault(key, []).append(value)
        print(
            f"\n== head / base ({commits['head'][:12]} / {commits['base'][:12]}), medians; {load()}"
        )
        print(ratio_table(figures["base"], figures["head"]))
    finally:
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for kept in [*tmp.glob("*.log"), *tmp.glob("*.json")]:
                shutil.copy2(kept, args.keep_logs / kept.name)
            print(f"logs kept in {args.keep_logs}", flush=True)
        for tree in trees.values():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
        git("worktree", "prune")
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
