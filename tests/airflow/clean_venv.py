"""A virtualenv as a user's Airflow would be: ``apache-airflow`` and this project's wheel, nothing
from the checkout.

The wheel is built from an sdist (``uv build``: the sdist in a temporary folder, so no stale
``build/`` of the checkout leaks into it). The venv holds exactly uv.lock's versions of the
``airflow`` and ``pipeline`` extras' dependencies (``uv export --format pylock.toml``), installed
from uv's cache with ``--offline``: ``make setup``'s ``uv sync`` filled that cache with every
locked wheel, so nothing is downloaded at test time. Processes run in it get neither the
checkout on ``sys.path`` nor its folders: Airflow finds the DAGs, the provider and the plugin
through the installed package alone.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("airflow", "pipeline")


def uv() -> str:
    """uv from PATH, else the bootstrap copy the Makefile makes under .local."""
    found = shutil.which("uv") or str(ROOT / ".local" / "uv-bootstrap" / "bin" / "uv")
    if not Path(found).exists():
        raise FileNotFoundError("uv not found: run `make setup` first")
    return found


def _run(*args: str, cwd: Path) -> None:
    out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}")


@dataclasses.dataclass(frozen=True)
class CleanVenv:
    path: Path
    wheel: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this venv first on PATH and nothing pointing into the checkout."""
        env = {k: v for k, v in base.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        path = [p for p in base.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))]
        env["PATH"] = os.pathsep.join([str(self.bin), *path])
        env["VIRTUAL_ENV"] = str(self.path)
        return env


def build(base: Path) -> CleanVenv:
    """The wheel, then a venv holding it and the locked dependencies of its extras."""
    tool = uv()
    dist = base / "dist"
    _run(tool, "build", "--offline", "-q", "-o", str(dist), cwd=ROOT)
    [wheel] = dist.glob("auditsync-*.whl")
    lock = base / "pylock.toml"
    extras = [a for e in EXTRAS for a in ("--extra", e)]
    _run(
        tool, "export", "--frozen", "--format", "pylock.toml", "--no-dev", "--no-emit-project",
        *extras, "-q", "-o", str(lock), cwd=ROOT,
    )  # fmt: skip
    venv = base / "venv"
    _run(tool, "venv", "-q", "--python", "python3.11", str(venv), cwd=base)
    python = str(venv / "bin" / "python")
    install = (tool, "pip", "install", "-q", "--offline", "--python", python)
    _run(*install, "-r", str(lock), cwd=base)
    _run(*install, "--no-deps", str(wheel), cwd=base)
    return CleanVenv(venv, wheel)
