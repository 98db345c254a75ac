"""Crash-safe file writes: what the sink's "nothing lost, nothing skipped" rests on.

A file is replaced atomically by writing a temp file in the same folder, fsyncing it, renaming
it over the target and fsyncing the folder (so the rename itself survives a power cut). Append
logs fsync after each batch of lines and repair a torn last line on load.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

TMP_PREFIX = ".tmp-"


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(target: Path, write: Callable[[BinaryIO], object]) -> None:
    """Make ``target`` hold what ``write`` writes, all or nothing, durably."""
    tmp = target.with_name(f"{TMP_PREFIX}{target.name}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    fsync_dir(target.parent)


def replace_bytes(target: Path, data: bytes) -> None:
    replace_file(target, lambda f: f.write(data))


def remove_temp_files(folder: Path) -> list[Path]:
    """Delete temp files a crash left behind; they never became visible under a real name."""
    stale = [p for p in folder.iterdir() if p.name.startswith(TMP_PREFIX)]
    for p in stale:
        p.unlink()
    return stale


def append_lines(path: Path, lines: Iterable[bytes]) -> None:
    """Append newline-terminated lines and fsync them (and the folder if the file is new)."""
    payload = b"".join(line + b"\n" for line in lines)
    if not payload:
        return
    created = not path.exists()
    with open(path, "ab") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    if created:
        fsync_dir(path.parent)


def read_lines(path: Path) -> list[bytes]:
    """Complete lines of an append log; a torn last line (crash mid-append) is cut off."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    end = raw.rfind(b"\n") + 1
    if end < len(raw):
        with open(path, "r+b") as f:
            f.truncate(end)
            os.fsync(f.fileno())
    return [line for line in raw[:end].split(b"\n") if line]
