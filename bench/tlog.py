"""Benchmark of the audit log's transparency log on a local folder. Not a test: it prints.

A topic log of HISTORY leaves (default 5 M; ``--quick``: 1 M) is grown in one publish, then one
run's worth of NEW leaves (2,000) is appended (what a run adds for the tree and checkpoint,
Iceberg read aside). Figures: the build rate, the run's append time and the objects it writes,
``prove`` (the function the command runs: a few tiles and one bundle read, the inclusion proof,
the tlog-proof text) over PROVES random seqs, the whole ``auditsync audit-log prove`` command
(a process: interpreter start and imports included), and the consistency proof between the two
trees plus the recomputation of the new leaves that ``verify --from --to`` does.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NEW = 2_000
PROVES = 50


def main(argv: list[str]) -> int:
    from spark_jobs import tlog_command
    from spark_jobs.tlog_store import TopicLog
    from watch_service.protocol.tlog import leaf, merkle, note
    from watch_service.storage import Storage

    history = 1_000_000 if "--quick" in argv else 5_000_000
    signer = note.Signer.generate("bench.example/log")

    def entries(first: int, last: int):
        for seq in range(first, last + 1):
            data = f'{{"n":{seq}}}'
            yield leaf.record({"topic": "orders", "seq": seq, "ts": seq, "data": data,
                               "origin": "delivered"})  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="bench-tlog-") as tmp:
        log = TopicLog.at(Storage.at(tmp), "orders", signer.verifier)
        started = time.perf_counter()
        log.append(signer, entries(1, history), run_id="r1")
        build = time.perf_counter() - started
        print(f"build: {history:,} leaves in {build:.1f} s ({history / build:,.0f} leaves/s)")

        before = {p for p in Path(tmp).rglob("*") if p.is_file()}
        started = time.perf_counter()
        log.append(signer, entries(history + 1, history + NEW), run_id="r2")
        grow = time.perf_counter() - started
        written = {p for p in Path(tmp).rglob("*") if p.is_file()} - before
        print(f"run: +{NEW:,} leaves appended and signed in {grow * 1000:.0f} ms, "
              f"{len(written)} new objects")  # fmt: skip

        size = history + NEW
        times = []
        for seq in random.Random(7).sample(range(1, size + 1), PROVES):
            started = time.perf_counter()
            tlog_command.prove(log, seq).text()
            times.append(time.perf_counter() - started)
        print(f"prove (function), {size:,}-leaf tree: median {statistics.median(times) * 1000:.1f}"
              f" ms, max {max(times) * 1000:.1f} ms over {PROVES} seqs")  # fmt: skip

        env = {**os.environ, "AUDITSYNC_LOG_VERIFIER_KEY": str(signer.verifier),
               "PYTHONPATH": str(ROOT)}  # fmt: skip
        argv_cli = [sys.executable, "-m", "watch_service.cli", "audit-log", "prove", "--work",
                    tmp, "--topic", "orders", "--seq", str(size // 2)]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(argv_cli, env=env, check=True, capture_output=True, timeout=60)
        print(f"prove (command, a new process): {(time.perf_counter() - started) * 1000:.0f} ms")

        old, _ = tlog_command.checkpoint_of(log, "r1")
        new, _ = tlog_command.checkpoint_of(log, "r2")
        started = time.perf_counter()
        src = log.hashes(new)
        proof = merkle.consistency_proof(src, old.size, new.size)
        merkle.verify_consistency(old.size, new.size, old.root, new.root, proof)
        signed = log.leaf_hashes(src, old.size, new.size)
        assert [merkle.leaf_hash(e) for e in entries(history + 1, size)] == signed
        took = time.perf_counter() - started
        print(f"verify --from r1 --to r2 (tree side, {NEW:,} leaves): {took * 1000:.0f} ms")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
