"""The dependency direction, enforced: every import in the project's code, read from its AST.

Every ``.py`` under ``watch_service/``, ``spark_jobs/``, ``plugins/``, ``dags/`` and ``bench/``
is parsed; absolute and relative imports are resolved (imports inside functions count too) and
each is classified into the layer it reaches. ``RULES`` says which layers each layer may import;
a failure names the file, the line, the import and the rule it breaks. ARCHITECTURE.md draws the
same picture in prose; this test is what keeps it true.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("watch_service", "spark_jobs", "plugins", "dags", "bench")
OURS_TOP = {"watch_service", "spark_jobs", "auditsync_plugin", "auditsync", "tests", "bench"}
IO_LIBRARIES = {
    "aiohttp",
    "psycopg",
    "psycopg_pool",
    "grpc",
    "pyarrow",
    "pyspark",
    "airflow",
    "great_expectations",
}
WS = "watch_service"

# layer of a watch_service submodule, by its first component after ``watch_service.``
WS_LAYERS = {
    "protocol": "protocol",
    "settings": "settings",
    "logs": "settings",  # how every command logs (text or JSON lines): imports nothing of ours
    "storage": "storage",
    "store": "store",
    "engine": "engine",
    "web": "web",
    "server": "server",
    "compat": "compat",
    "sink": "sink",
    "app": "app",
    "cli": "cli",
    "serve": "cli",  # the `serve --workers` supervisor and its workers
    "worker_handshake": "cli",  # their start-up lines
    "tools": "tools",
    "watch_client": "client",
    "": "package",
}
SERVICE = {
    "protocol",
    "settings",
    "storage",
    "store",
    "engine",
    "web",
    "server",
    "compat",
    "sink",
    "client",
    "app",
    "package",
}
EVERYTHING = SERVICE | {"cli", "tools", "spark_jobs", "plugins", "bench", "dags", "tests"}
DATA_SIDE = {"protocol", "store", "settings", "storage", "package"}

# layer -> (the layers it may import, the rule in words)
RULES: dict[str, tuple[set[str], str]] = {
    "package": ({"package"}, "the package root imports nothing of ours"),
    "protocol": (
        {"protocol", "package"},
        "protocol is pure: it imports nothing of ours but protocol, and no I/O library",
    ),
    "settings": ({"protocol", "package"}, "settings.py imports only protocol"),
    "storage": (
        {"protocol", "package"},
        "storage.py (locations, filesystems) imports only protocol",
    ),
    "store": ({"store", "protocol", "settings", "package"}, "store -> protocol, settings"),
    "engine": ({"engine"} | DATA_SIDE, "engine -> store, protocol, settings"),
    "web": ({"web", "engine"} | DATA_SIDE, "web -> engine, store, protocol, settings"),
    "server": (
        {"server", "web", "engine"} | DATA_SIDE,
        "server -> web, engine, store, protocol, settings (never compat)",
    ),
    "compat": (
        {"compat", "web", "engine"} | DATA_SIDE,
        "compat -> web, engine, store, protocol, settings (never server)",
    ),
    "sink": (
        {"sink"} | DATA_SIDE,
        "sink -> protocol, store, settings (not server/compat/engine/web)",
    ),
    "client": ({"client", "sink"} | DATA_SIDE, "the SSE client -> sink, protocol, settings, store"),
    "app": (
        EVERYTHING - {"tools", "cli", "tests", "bench", "dags"},
        "app.py may import anything but tools/cli",
    ),
    "cli": (EVERYTHING - {"tools", "tests", "bench", "dags"}, "cli -> anything but tools"),
    "tools": (EVERYTHING - {"tests", "bench", "dags"}, "tools -> anything (but tests/bench)"),
    "spark_jobs": (
        {"spark_jobs"} | DATA_SIDE,
        "spark_jobs reach watch_service only via protocol, store, settings",
    ),
    "plugins": (
        {"plugins", "spark_jobs"} | DATA_SIDE,
        "plugins reach watch_service only via protocol, store, settings",
    ),
    "dags": ({"plugin_api"}, "dags import only the plugin (auditsync_plugin) and third-party"),
    "bench": (EVERYTHING - {"tests", "dags"}, "bench never imports tests"),
}


@dataclass(frozen=True)
class Import:
    path: str  # file, relative to the repo root
    line: int
    target: str  # resolved dotted module name
    source_layer: str
    target_layer: str | None  # None: third-party or standard library


def module_name(rel: Path) -> str:
    """The dotted name a file is imported as (plugins/ and dags/ are on Airflow's sys.path)."""
    parts = list(rel.with_suffix("").parts)
    if parts[0] in ("plugins", "dags"):
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of_file(rel: Path) -> str:
    top = rel.parts[0]
    if top == WS:
        return layer_of_module(module_name(rel)) or "unassigned"
    return {"spark_jobs": "spark_jobs", "plugins": "plugins", "dags": "dags", "bench": "bench"}[top]


def layer_of_module(name: str, importer_top: str = "") -> str | None:
    """The layer a dotted module name belongs to; None when it is not ours."""
    parts = name.split(".")
    top = parts[0]
    if top == WS:
        return WS_LAYERS.get(parts[1] if len(parts) > 1 else "", "unassigned")
    if top == "auditsync_plugin":
        return "plugin_api" if importer_top == "dags" else "plugins"
    if top == "auditsync":
        return "plugins"
    if top in ("spark_jobs", "tests", "bench"):
        return top
    if importer_top == "bench" and (ROOT / "bench" / f"{top}.py").exists():
        return "bench"  # bench scripts import their siblings (their folder is on sys.path)
    return None


def is_module(dotted: str) -> bool:
    for root in (ROOT, ROOT / "plugins"):
        base = root.joinpath(*dotted.split("."))
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            return True
    return False


def resolve(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> Iterator[str]:
    """Dotted names an import reaches (``from X import Y`` is ``X.Y`` when Y is a module)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    for alias in node.names:
        candidate = f"{base}.{alias.name}" if base else alias.name
        yield candidate if alias.name != "*" and is_module(candidate) else base


def imports_of(rel: Path, source: str) -> Iterator[Import]:
    importer = module_name(rel)
    is_package = rel.name == "__init__.py"
    source_layer = layer_of_file(rel)
    for node in ast.walk(ast.parse(source, str(rel))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in resolve(node, importer, is_package):
                yield Import(
                    str(rel),
                    node.lineno,
                    target,
                    source_layer,
                    layer_of_module(target, rel.parts[0]),
                )


def project_imports() -> list[Import]:
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            found.extend(imports_of(rel, path.read_text(encoding="utf-8")))
    return found


def violation(imp: Import) -> str | None:
    """The broken rule, in words, or None when the import is allowed."""
    allowed, rule = RULES.get(imp.source_layer, (set(), "every module belongs to a layer"))
    if imp.target_layer is None:
        top = imp.target.split(".")[0]
        if imp.source_layer == "protocol" and top in IO_LIBRARIES:
            return rule
        return None
    return None if imp.target_layer in allowed else rule


def layer_cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Every elementary cycle's first appearance in a DFS over the layer graph."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        if a != b:
            graph.setdefault(a, set()).add(b)
    cycles, seen = [], set()

    def visit(node: str, stack: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in stack:
                cycle = stack[stack.index(nxt) :] + [nxt]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    cycles.append(cycle)
            elif len(stack) < len(graph) + 1:
                visit(nxt, [*stack, nxt])

    for start in sorted(graph):
        visit(start, [start])
    return cycles


def fmt(imp: Import) -> str:
    rule = violation(imp)
    return (
        f"{imp.path}:{imp.line}: {imp.source_layer} imports {imp.target} "
        f"({imp.target_layer or 'third-party'}) - rule: {rule}"
    )


# -- the guards -----------------------------------------------------------------------------------
def test_every_service_module_has_a_layer() -> None:
    unassigned = sorted(
        {
            str(p.relative_to(ROOT))
            for p in (ROOT / WS).rglob("*.py")
            if layer_of_file(p.relative_to(ROOT)) == "unassigned"
        }
    )
    assert not unassigned, f"modules with no layer (add them to WS_LAYERS): {unassigned}"


def test_imports_follow_the_layers() -> None:
    broken = sorted({fmt(imp) for imp in project_imports() if violation(imp)})
    assert not broken, "layering violations:\n" + "\n".join(broken)


def test_no_cycles_between_layers() -> None:
    edges = {
        (imp.source_layer, imp.target_layer)
        for imp in project_imports()
        if imp.target_layer is not None
    }
    cycles = layer_cycles(edges)
    assert not cycles, "import cycles between layers:\n" + "\n".join(" -> ".join(c) for c in cycles)


# -- the checker itself, on made-up files ---------------------------------------------------------
def _imports(rel: str, source: str) -> list[tuple[int, str, str | None, str | None]]:
    return [(i.line, i.target, i.target_layer, violation(i)) for i in imports_of(Path(rel), source)]


def test_relative_and_function_level_imports_resolve() -> None:
    src = (
        "from . import topics\n"
        "from ..engine.tailer import Hub\n"
        "def f():\n"
        "    from watch_service import settings\n"
        "    import aiohttp\n"
    )
    found = _imports("watch_service/store/x.py", src)
    assert found[0][:3] == (1, "watch_service.store.topics", "store")
    assert found[1][:3] == (2, "watch_service.engine.tailer", "engine")
    assert found[1][3] == RULES["store"][1]
    assert found[2][:3] == (4, "watch_service.settings", "settings")
    assert found[3][:3] == (5, "aiohttp", None) and found[3][3] is None


def test_protocol_may_not_import_io_libraries() -> None:
    found = _imports("watch_service/protocol/x.py", "import psycopg\nimport json\n")
    assert [v for *_, v in found] == [RULES["protocol"][1], None]


def test_dags_bench_and_plugins() -> None:
    assert _imports("dags/d.py", "from auditsync_plugin.hooks import H\n")[0][3] is None
    assert _imports("dags/d.py", "from watch_service.store import topics\n")[0][3] is not None
    assert _imports("bench/b.py", "from tests.support import free_port\n")[0][3] is not None
    plugin = "plugins/auditsync_plugin/j.py"
    assert _imports(plugin, "import watch_service.store.topics\n")[0][3] is None
    assert _imports(plugin, "from watch_service.app import create_app\n")[0][3]


def test_cycles_are_found() -> None:
    assert layer_cycles({("server", "compat"), ("compat", "server"), ("server", "web")}) == [
        ["compat", "server", "compat"]
    ]
    assert layer_cycles({("a", "b"), ("b", "c")}) == []


# -- inside spark_jobs: steps never import each other, the base never reaches up, no circle ------
# The modules every step and command may stand on; they import nothing of spark_jobs but each
# other (what two steps share moves here).
SPARK_BASE = ("spark_jobs.common", "spark_jobs.warehouse")
# No circle is left inside spark_jobs: the last one (issue 33's ``tlog_command`` dispatching
# ``verify``, which read the log through ``tlog_command``) went when the subcommands moved to
# ``tlog_cli``. The test fails when a circle appears.
KNOWN_SPARK_CIRCLES: set[frozenset[str]] = set()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def step_of(name: str) -> str | None:
    """``verify`` for ``spark_jobs.steps.verify.main``; None outside the steps."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["spark_jobs", "steps"] else None


def spark_violation(importer: str, target: str) -> str | None:
    """The rule an import between two spark_jobs modules breaks, or None."""
    if not _within(target, "spark_jobs") or target == "spark_jobs":
        return None
    mine, theirs = step_of(importer), step_of(target)
    if mine and theirs and mine != theirs:
        return "a step never imports another step: what two steps share moves to common/"
    base = any(_within(importer, b) for b in SPARK_BASE)
    if base and not any(_within(target, b) for b in SPARK_BASE):
        return f"the base ({', '.join(SPARK_BASE)}) imports nothing above it"
    return None


def spark_edges() -> set[tuple[str, str]]:
    """(importer, imported) between spark_jobs modules, imports inside functions included."""
    return {
        (module_name(Path(imp.path)), imp.target)
        for imp in project_imports()
        if imp.path.startswith("spark_jobs/") and _within(imp.target, "spark_jobs")
    }


def circles(edges: set[tuple[str, str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = {stack.pop()}
            while node not in part:
                part.add(stack.pop())
            if len(part) > 1:
                found.add(frozenset(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_spark_jobs_steps_and_base_import_downward() -> None:
    broken = sorted(
        f"{a} imports {b}: {rule}" for a, b in spark_edges() if (rule := spark_violation(a, b))
    )
    assert not broken, "spark_jobs layering:\n" + "\n".join(broken)


def test_no_circle_inside_spark_jobs() -> None:
    found = circles(spark_edges())
    assert found == KNOWN_SPARK_CIRCLES, "circles inside spark_jobs:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in found
    )


def test_the_spark_checks_themselves() -> None:
    step = "spark_jobs.steps.verify.main"
    assert spark_violation(step, "spark_jobs.steps.backfill.writes") is not None
    assert spark_violation(step, "spark_jobs.steps.verify.transforms") is None
    assert spark_violation(step, "spark_jobs.warehouse.tables") is None
    assert spark_violation("spark_jobs.warehouse.tables", "spark_jobs.legacy") is not None
    assert spark_violation("spark_jobs.warehouse.tables", "spark_jobs.warehouse.readers") is None
    assert spark_violation("spark_jobs.runner", "spark_jobs.steps.reconcile.main") is None
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("f", "f")}
    assert circles(edges) == {frozenset("abc"), frozenset("de")}


def test_no_circle_inside_the_service() -> None:
    edges = {
        (module_name(Path(imp.path)), imp.target)
        for imp in project_imports()
        if imp.path.startswith(f"{WS}/") and _within(imp.target, WS)
    }
    found = circles(edges)
    assert not found, "circles inside watch_service:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in found
    )


# -- the warehouse has one owner: spark_jobs/warehouse/ ------------------------------------------
# Nothing else in the product commits to a table, names one, reads its metadata or runs a
# maintenance procedure. A grep over each module's code (its strings, f-strings included, and
# the names it uses; docstrings and comments left out), so a raw statement or a second door
# fails here with its file and line.
OWNER = "spark_jobs/warehouse/"
OWNED_SQL = {
    "MERGE INTO": re.compile(r"\bMERGE\s+INTO\b", re.IGNORECASE),
    "DELETE FROM": re.compile(r"\bDELETE\s+FROM\b", re.IGNORECASE),
    "a procedure CALL": re.compile(r"\bCALL\s", re.IGNORECASE),
    "VERSION AS OF": re.compile(r"\bVERSION\s+AS\s+OF\b", re.IGNORECASE),
    "CREATE TABLE": re.compile(r"\bCREATE\s+TABLE\b", re.IGNORECASE),
}
# Names whose use is a door of its own: a writer, a catalog's table lookup, a table's name.
OWNED_NAMES = {"writeTo", "load_table", "NAMESPACE", "_METADATA_ACCESS", "quote", "_quote"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def owner_violations(rel: str, source: str) -> list[str]:
    """Where a module outside the warehouse package does the warehouse's work (pure)."""
    if rel.startswith(OWNER):
        return []
    tree = ast.parse(source, rel)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out += [
                f"{rel}:{node.lineno}: {what}"
                for what, rx in OWNED_SQL.items()
                if rx.search(node.value)
            ]
        elif isinstance(node, ast.Attribute) and node.attr in OWNED_NAMES:
            if not (node.attr == "quote" and ast.unparse(node.value) != "tables"):
                out.append(f"{rel}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in OWNED_NAMES - {"quote"}:
            out.append(f"{rel}:{node.lineno}: {node.id}")
        elif isinstance(node, ast.alias) and node.name in OWNED_NAMES - {"quote"}:
            out.append(f"{rel}:{node.lineno}: imports {node.name}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "table"
            and "layout" in ast.unparse(node.func.value)
        ):
            out.append(f"{rel}:{node.lineno}: names a table ({ast.unparse(node.func)})")
    return sorted(out, key=lambda line: (int(line.split(":")[1]), line))


def test_only_the_warehouse_commits_or_names_a_table() -> None:
    broken = []
    for top in ("spark_jobs", "plugins", "dags"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            broken += owner_violations(rel, path.read_text(encoding="utf-8"))
    assert not broken, "the warehouse's work outside spark_jobs/warehouse/:\n" + "\n".join(broken)


def test_the_owner_check_itself() -> None:
    step = "spark_jobs/steps/backfill/writes.py"
    raw = (
        '"""A MERGE INTO in a docstring is prose."""\n'
        "def f(spark, layout, t):\n"
        "    spark.sql(f\"MERGE INTO {layout.table('audit_log')} t USING v s\")\n"
        "    spark.sql(f\"DELETE FROM x WHERE t = '{tables.quote(t)}'\")\n"
        "    df.writeTo(name).append()\n"
    )
    assert owner_violations(step, raw) == [
        f"{step}:3: MERGE INTO",
        f"{step}:3: names a table (layout.table)",
        f"{step}:4: .quote",
        f"{step}:4: DELETE FROM",
        f"{step}:5: .writeTo",
    ]
    assert owner_violations("spark_jobs/warehouse/warehouse.py", raw) == []
    assert owner_violations(step, "from urllib.parse import quote\nquote('x')\n") == []
