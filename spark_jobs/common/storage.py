"""Filesystem operations on the warehouse, in plain Python (``os``), not Hadoop's FileSystem
through the JVM: they work the same under classic Spark and Spark Connect (whose client has no
JVM), provided the warehouse and landing paths are a filesystem both this process and the
Spark executors see (local disk on one machine, a shared mount beyond it).

Atomicity comes from ``os.replace``/``os.rename`` within one filesystem: a JSON record is
written to a temp file, fsynced and renamed over its name; a directory is swapped in by
moving the old one aside under a dot-name (Spark's file listing ignores names starting with
``.`` or ``_``), renaming the staged one in, then deleting the old one. A crash leaves either
version under a known name; ``recover_swap`` finishes or undoes it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` to ``path`` atomically and durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    with open(tmp, "w") as f:
        json.dump(value, f, sort_keys=True, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Delete a file or a directory tree; nothing when it is not there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def data_files(root: Path) -> list[Path]:
    """Parquet data files under ``root`` that a Spark reader would see, sorted."""
    found: list[Path] = []
    if not root.is_dir():
        return found
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [
            Path(folder) / f
            for f in sorted(files)
            if f.endswith(".parquet") and not f.startswith((".", "_"))
        ]
    return found


def _retired(target: Path) -> Path:
    return target.with_name(f".retired-{target.name}")


def swap_in(staged: Path, target: Path) -> None:
    """Replace directory ``target`` with ``staged`` (same filesystem)."""
    retired = _retired(target)
    remove(retired)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        os.rename(target, retired)
    os.rename(staged, target)
    fsync_dir(target.parent)
    remove(retired)


def recover_swap(target: Path) -> None:
    """After a crash inside ``swap_in``: put the retired copy back if nothing replaced it."""
    retired = _retired(target)
    if retired.exists():
        if target.exists():
            remove(retired)
        else:
            os.rename(retired, target)
