"""Run every benchmark in ``bench/`` one after another (``make bench``).

Each ``bench/*.py`` other than this file runs as its own process with this interpreter, so one
benchmark's servers and memory are gone before the next starts. Extra arguments are passed to
every benchmark (e.g. ``--quick``). Exits non-zero if any benchmark failed or overran.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 300  # each benchmark bounds itself; this is the backstop
# Benchmarks whose default run is longer (reconcile.py: 1 M rows, datacompy and PostgreSQL;
# pipeline.py: histories of 1 M and 5 M records and several Airflow runs;
# iceberg_maintenance.py: 200 real pipeline runs and four maintenance passes; year_landing.py:
# 1 M landing segments seeded on file, 100 k on S3).
TIMEOUTS_S = {
    "reconcile.py": 900,
    "pipeline.py": 1800,
    "cli_run.py": 900,  # nine cold pipeline runs
    "iceberg_maintenance.py": 6000,
    "tlog.py": 900,  # a 5 M-leaf log built in Python
    "year_landing.py": 2400,
}


NOT_RUN = {Path(__file__).name, "compare.py"}  # compare.py runs the others on two commits


def benchmarks() -> list[Path]:
    return sorted(
        p for p in HERE.glob("*.py") if p.name not in NOT_RUN and not p.name.startswith("_")
    )


def main(argv: list[str]) -> int:
    failed: list[str] = []
    found = benchmarks()
    if not found:
        print("no benchmarks in bench/", file=sys.stderr)
        return 1
    for path in found:
        print(f"== {path.name}", flush=True)
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, str(path), *argv], cwd=HERE.parent)
        code: int | str
        try:
            code = proc.wait(TIMEOUTS_S.get(path.name, TIMEOUT_S))
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM: the benchmark stops what it started
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            code = "timeout"
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        elapsed = time.monotonic() - started
        print(
            f"== {path.name}: {'ok' if code == 0 else f'FAILED ({code})'} in {elapsed:.1f} s\n",
            flush=True,
        )
        if code != 0:
            failed.append(path.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
