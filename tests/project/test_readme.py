"""The README works when followed literally, top to bottom, and then the docs/ pages in the
site's order (mkdocs.yml's ``nav``): the pages continue the README's shell.

Its ```` ```console ```` blocks are transcripts: a ``$ `` line is a command (the lines after it
that start with whitespace continue it), a ``# `` line is a comment, every other line is the
output the command before it prints; ``…`` in an output stands for any text (times, ids). The
e2e test starts the Quickstart's ``auditsync serve`` on a fresh embedded PostgreSQL (its own
home and ports: ``8400`` and ``54329`` in the README become the test's free ports, and
``.venv/bin/auditsync`` this interpreter's ``-m watch_service.cli``), runs every console block
in document order (the README, then each page) in one shell, compares each output and exit
status (0; 28 for a curl cut by its ``--max-time``), presses Ctrl-C where the docs say so and
compares what ``serve`` prints,
then runs the rest (``auditsync db stop``). The unit tests keep the rest of the README true: the
first screen, every link inside the repository, the configuration table against ``settings``,
and every ``make`` target and ``auditsync`` command it names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT, free_port
from watch_service.cli import _DELEGATED, build_parser
from watch_service.settings import _ENV
from watch_service.store.cluster import EmbeddedPostgres

README = ROOT / "README.md"
SITE = ROOT / "mkdocs.yml"
CTRL_C_MARK = "auditsync: stopped the service"
SERVE_LINE = ".venv/bin/auditsync serve"
TIMEOUT_S = 60


@dataclasses.dataclass(frozen=True)
class Block:
    lang: str
    lines: tuple[str, ...]
    line_no: int
    source: str = "README"


@dataclasses.dataclass(frozen=True)
class Step:
    command: str
    expected: str
    line_no: int
    source: str = "README"


def pages() -> list[Path]:
    """The docs/ site's pages in its nav order (mkdocs.yml), each once."""
    nav = yaml.safe_load(SITE.read_text())["nav"]
    return [ROOT / "docs" / page for entry in nav for page in entry.values()]


def documents() -> list[tuple[str, str]]:
    """(name, text) of the README, then of every docs page, in the order they are read."""
    return [(path.relative_to(ROOT).as_posix(), path.read_text()) for path in [README, *pages()]]


def blocks(text: str, source: str = "README") -> list[Block]:
    """The fenced code blocks of a Markdown text, in order."""
    found, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m:
            end = lines.index("```", i + 1)
            found.append(Block(m.group(1), tuple(lines[i + 1 : end]), i + 1, source))
            i = end
        i += 1
    return found


def steps(block: Block) -> list[Step]:
    """The commands of a console block with the output each is shown to print."""
    out: list[Step] = []
    command: list[str] = []
    expected: list[str] = []
    start = 0

    def flush() -> None:
        if command:
            out.append(Step("\n".join(command), "\n".join(expected), start, block.source))

    in_command = False
    for n, line in enumerate(block.lines, block.line_no + 1):
        if line.startswith("$ "):
            flush()
            command, expected, start, in_command = [line[2:]], [], n, True
        elif in_command and line[:1].isspace():
            command.append(line)
        elif line.startswith("# "):
            in_command = False
        else:
            in_command = False
            expected.append(line)
    flush()
    return out


def matches(expected: str, actual: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in expected.split("…"))
    return re.fullmatch(pattern, actual, re.DOTALL) is not None


# -- the README run -------------------------------------------------------------------------


def segments(docs: list[tuple[str, str]]) -> tuple[list[Step], str, list[Step]]:
    """The steps before the Ctrl-C point, what serve prints there, the steps after it."""
    before: list[Step] = []
    after: list[Step] = []
    ctrl_c = None
    for block in (b for name, text in docs for b in blocks(text, name)):
        if block.lang == "text" and block.lines and block.lines[0].startswith(CTRL_C_MARK):
            ctrl_c = block.lines[0]
        elif block.lang == "console":
            (before if ctrl_c is None else after).extend(steps(block))
    assert ctrl_c is not None, "the README or a docs page shows what Ctrl-C on serve prints"
    return before, ctrl_c, after


def run_steps(todo: list[Step], env: dict[str, str], port: int) -> None:
    """Every step in one bash, so variables carry over; each output and status compared."""
    script = []
    for i, step in enumerate(todo):
        command = step.command.replace(
            ".venv/bin/auditsync", f"{sys.executable} -m watch_service.cli"
        )
        script.append(command.replace(":8400", f":{port}"))
        script.append(f"printf '\\n@@STEP {i} %d@@\\n' \"$?\"")
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    parts = re.split(r"\n@@STEP (\d+) (\d+)@@\n", done.stdout)
    results = {
        int(parts[i + 1]): (parts[i], int(parts[i + 2])) for i in range(0, len(parts) - 1, 3)
    }
    for i, step in enumerate(todo):
        assert i in results, f"{step.source} line {step.line_no}: did not run\n{done.stderr}"
        actual, status = results[i]
        allowed = 28 if "--max-time" in step.command else 0
        where = f"{step.source} line {step.line_no}: {step.command}"
        assert status == allowed, f"{where}\nexit {status}\n{actual}\n{done.stderr}"
        expected = step.expected.replace(":8400", f":{port}").rstrip("\n")
        actual = actual.rstrip("\n")
        if "auditsync watch" in step.command:
            # one line per frame, "event topic …": frames of different topics interleave as
            # they are ready, so each topic's lines are compared in order
            expected, actual = by_topic(expected), by_topic(actual)
        assert matches(expected, actual), (
            f"{where}\n--- shown ---\n{expected}\n--- printed ---\n{actual}"
        )


def by_topic(lines: str) -> str:
    """The lines grouped by their second word (the topic), each group in its order."""
    groups: dict[str, list[str]] = {}
    for line in lines.splitlines():
        groups.setdefault(line.split()[1], []).append(line)
    return "\n".join(line for topic in sorted(groups) for line in groups[topic])


@pytest.mark.e2e
async def test_the_readme_runs_top_to_bottom():
    assert SERVE_LINE in README.read_text()
    before, ctrl_c, after = segments(documents())
    assert len(before) >= 10 and after
    home = Path(tempfile.mkdtemp(prefix="auditsync-readme-"))
    home.chmod(0o755)  # the embedded cluster runs as postgres when the tests run as root
    port, pg_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {
        "AUDITSYNC_HOME": str(home),
        "AUDITSYNC_PORT": str(port),
        "AUDITSYNC_PG_PORT": str(pg_port),
        "PYTHONPATH": str(ROOT),
    }
    serve = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "watch_service.cli",
        "serve",
        cwd=ROOT,
        env=env,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert serve.stderr is not None
    try:
        log = []
        while not log or "serving on" not in log[-1]:
            line = (await asyncio.wait_for(serve.stderr.readline(), TIMEOUT_S)).decode()
            assert line, "".join(log)
            log.append(line)
        await asyncio.to_thread(run_steps, before, env, port)
        serve.send_signal(signal.SIGINT)
        rest = (await asyncio.wait_for(serve.stderr.read(), TIMEOUT_S)).decode()
        assert await asyncio.wait_for(serve.wait(), TIMEOUT_S) == 0
        shown = ctrl_c.replace(":8400", f":{port}").replace(":54329", f":{pg_port}")
        assert rest.rstrip("\n").splitlines()[-1] == shown
        await asyncio.to_thread(run_steps, after, env, port)
    finally:
        if serve.returncode is None:
            os.killpg(serve.pid, signal.SIGKILL)
            await serve.wait()
        EmbeddedPostgres(home / "pg", pg_port).stop()
        shutil.rmtree(home, ignore_errors=True)


# -- the rest of the README stays true ---------------------------------------------------------

unit = pytest.mark.unit
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS = [
    README,
    ROOT / "ARCHITECTURE.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "watch_service").rglob("*.md")),
]
# a repository path written as code in a docs page (`watch_service/…/x.json`): the site cannot
# link outside docs/, so these are checked here instead
TRACKED_TOP = {"watch_service", "spark_jobs", "plugins", "dags", "tests", "bench", "docs"}
REPO_PATH = re.compile(r"^(?:[\w.-]+/)+[\w.-]+\.(?:md|py|json|txt|yml|yaml|toml|sql|proto)$")


def code_text(text: str) -> str:
    """The README's inline code spans and code blocks, where commands are written."""
    return "\n".join(
        [*re.findall(r"`([^`\n]+)`", text), *("\n".join(b.lines) for b in blocks(text))]
    )


@unit
def test_the_first_screen_is_the_two_commands():
    first = blocks(README.read_text())[0]
    assert first.lang == "sh" and first.line_no < 10
    assert [line.split()[:2] for line in first.lines] == [["make", "demo"], ["make", "test"]]


@unit
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_stays_inside_the_repository(doc):
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"{doc.name}: {target}"
    assert "/work/" not in doc.read_text()


@unit
def test_every_pages_nav_entry_is_a_page_and_every_page_is_in_the_nav():
    assert sorted(p.name for p in pages()) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))


@unit
@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_repository_path_a_page_names_exists(page):
    named = [s for s in re.findall(r"`([^`\n]+)`", page.read_text()) if REPO_PATH.match(s)]
    # only paths from the repository's root (`watch_service/…`), not generated `.local/…` ones
    # nor ones relative to a folder the text names (`authz/test_x.py` under tests/)
    rooted = [s for s in named if s.split("/")[0] in TRACKED_TOP]
    missing = [s for s in rooted if not (ROOT / s).exists()]
    assert missing == [], f"{page.name}: {missing}"


@unit
def test_the_configuration_table_is_every_setting():
    text = (ROOT / "docs" / "operations.md").read_text()
    table = text[text.index("## Configuration") : text.index("### Keys file")]
    assert set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.M)) == set(_ENV)


@unit
def test_every_make_target_and_command_named_exists():
    code = "\n".join(code_text(text) for _, text in documents())
    makefile = (ROOT / "Makefile").read_text()
    for target in set(re.findall(r"\bmake ([a-z][a-z0-9-]*)", code)):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}"
    commands = {name for name, _, _ in _DELEGATED}
    for action in build_parser()._subparsers._group_actions:  # type: ignore[union-attr]
        commands |= set(action.choices)
    named = set(re.findall(r"(?:(?<![\w/.-])|(?<=bin/))auditsync ([a-z][a-z-]*)", code))
    assert named <= commands, named - commands
