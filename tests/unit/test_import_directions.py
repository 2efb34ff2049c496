"""The library's import directions (docs/architecture.md, "Packages and their imports"),
read from the source with ``ast``: each runtime package imports only packages below it;
the DSL, topology, processors and state know nothing of the runtime; no import cycle
between modules (the DSL's fluent ring, all inside ``dsl/``, aside)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[2] / "lib" / "lakestate"

#: Runtime packages by layer: a package imports its own modules and lower layers' only.
LAYERS: dict[str, int] = {
    "io": 0,
    "assign": 1,
    "checkpoint": 1,
    "restore": 2,
    "runtime": 3,
    "ops": 4,
    "scaleout": 4,
    "read": 5,
    "cli": 6,
    "airflow": 6,
    "api": 7,
}
#: Know nothing of the runtime: they may import each other and the shared modules only.
CORE = {"dsl", "topology", "processors", "state", "testing"}
#: Shared by everyone, importing no package above.
SHARED = {
    "app",
    "delta_source",
    "delta_sink",
    "errors",
    "records",
    "serdes",
    "task_id",
    "warehouse",
    "object_store",
    "console",
    "logfile",
    "__init__",
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in LIB.rglob("*.py"):
        parts = path.relative_to(LIB).with_suffix("").parts
        name = ".".join(("lakestate", *parts))
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(
    path: Path, top_level_only: bool, root: str = "lakestate"
) -> Iterator[tuple[str, int]]:
    """The ``root`` package's modules ``path`` imports (``TYPE_CHECKING`` blocks skipped),
    with the line; ``top_level_only``: those run at import time (not inside functions)."""
    tree = ast.parse(path.read_text())
    package = ".".join(
        MODULES_BY_PATH[path].split(".")[: -1 if path.name != "__init__.py" else None]
    )

    def visit(node: ast.AST, nested: bool) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import) and not (top_level_only and nested):
                for alias in child.names:
                    yield alias.name, child.lineno
            elif isinstance(child, ast.ImportFrom) and not (top_level_only and nested):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1] + [base]
                    ).rstrip(".")
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    yield (full if full in MODULES else base), child.lineno
            yield from visit(child, inner)

    for name, line in visit(tree, False):
        if name == root or name.startswith(f"{root}."):
            yield name, line


MODULES_BY_PATH = {path: name for name, path in MODULES.items()}


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _violations() -> list[str]:
    bad = []
    for module, path in sorted(MODULES.items()):
        area = _area(module)
        for target, line in _imports(path, top_level_only=False):
            other = _area(target)
            if other == area or other in SHARED:
                continue
            where = f"{path.relative_to(LIB.parent)}:{line} imports {target}"
            if area in CORE or area in SHARED:
                if other not in CORE and not (area == "__init__" and other == "api"):
                    bad.append(f"{where}: {area} must know nothing of {other}")
            elif area in LAYERS:
                if other in CORE:
                    continue
                if LAYERS.get(other, 99) >= LAYERS[area]:
                    bad.append(f"{where}: {area} (layer {LAYERS[area]}) may not import {other}")
            else:
                bad.append(f"{where}: package {area} has no place in LAYERS, CORE or SHARED")
    return bad


def test_every_import_goes_down_the_layers():
    assert _violations() == []


def test_no_import_cycle_between_modules():
    graph = {
        module: {t for t, _ in _imports(path, top_level_only=False) if t in MODULES and t != module}
        for module, path in MODULES.items()
    }
    cycles = []
    for start in graph:
        if _area(start) == "dsl":
            continue  # the fluent ring (KStream <-> KTable <-> grouped) imports lazily
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif nxt not in seen and not (_area(nxt) == "dsl"):
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    # One line per cycle, from its smallest module.
    unique = sorted({c for c in cycles if c.split(" -> ")[0] == min(c.split(" -> ")[:-1])})
    assert unique == []


#: The modules that import pyspark when imported: Spark's transport, session and topic
#: reads, the Spark SQL engine, the conversion of old tables (Spark's own writes).
SPARK_MODULES = {
    "lakestate.runtime.spark_transport",
    "lakestate.runtime.spark_session",
    "lakestate.runtime.spark_topics",
    "lakestate.runtime.spark_kept",
    "lakestate.runtime.spark_located",
    "lakestate.read.spark_engine",
    "lakestate.ops.convert",
}
#: The no-JVM path: a run in this process, the CLI's entry and its run command.
NO_JVM = (
    "lakestate.runtime.runner",
    "lakestate.runtime.routing",
    "lakestate.runtime.inprocess",
    "lakestate.runtime.transport",
    "lakestate.scaleout.instance_run",
    "lakestate.cli.main",
    "lakestate.cli.run",
)


def test_only_the_spark_modules_import_pyspark_when_imported():
    importing = {
        module
        for module, path in MODULES.items()
        for root in ("pyspark", "py4j")
        if any(_imports(path, top_level_only=True, root=root))
    }
    assert importing <= SPARK_MODULES, sorted(importing - SPARK_MODULES)


def test_the_no_jvm_path_imports_no_spark_module():
    """What the no-JVM path imports when imported, transitively, holds no module that
    imports pyspark (the runner imports the Spark transport once a run chose Spark)."""
    for start in NO_JVM:
        seen, todo = {start}, [start]
        while todo:
            for target, _ in _imports(MODULES[todo.pop()], top_level_only=True):
                while target not in MODULES and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in MODULES and target not in seen:
                    seen.add(target)
                    todo.append(target)
        assert not seen & SPARK_MODULES, (start, sorted(seen & SPARK_MODULES))


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from lakestate.runtime import runner\n", "runtime"),
        ("from lakestate.cli import main\n", "cli"),
    ],
)
def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch, source, expected):
    """A checkpoint module importing a higher layer is reported (the check can fail)."""
    path = LIB / "checkpoint" / "batch.py"
    monkeypatch.setattr(
        Path, "read_text", lambda self, *a, **k: source if self == path else _read(self)
    )
    found = [v for v in _violations() if v.startswith("lakestate/checkpoint/batch.py")]
    assert found and expected in found[0]


_read = Path.read_text
