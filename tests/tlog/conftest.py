"""The signed-log tests' third-party checker: ``tests/tlog/go`` (pinned ``golang.org/x/mod``
and ``github.com/transparency-dev/merkle`` from the Go module proxy), built once per session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

GO_SOURCE = ROOT / "tests" / "tlog" / "go"


@pytest.fixture(scope="session")
def tlogcheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The machine's Go (PATH, else the official install's folder); without it the check fails
    # loudly: a skipped third-party check would prove nothing.
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    assert go is not None, "no Go toolchain: the third-party check needs `go` on PATH"
    out = tmp_path_factory.mktemp("go") / "tlogcheck"
    subprocess.run(
        [go, "build", "-o", str(out), "."],
        cwd=GO_SOURCE,
        check=True,
        timeout=600,
        capture_output=True,
    )
    return out
