"""The library's size limits (issue 24, "modules under ~500 lines and functions under ~60
lines"), read from the source with ``ast``: a function or method spans at most
MAX_FUNCTION_LINES lines (its ``def`` to its last line, docstring and nested functions
included) and a module at most MAX_MODULE_LINES lines."""

from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib" / "lakestate"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500


def _modules() -> list[Path]:
    found = sorted(LIB.rglob("*.py"))
    assert found, f"no modules under {LIB}"
    return found


def test_every_function_is_at_most_60_lines() -> None:
    too_long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    where = f"{path.relative_to(LIB.parent)}:{node.lineno}"
                    too_long.append(f"  {where} {node.name}: {lines} lines")
    assert not too_long, (
        f"functions longer than {MAX_FUNCTION_LINES} lines:\n"
        + "\n".join(too_long)
        + "\nSplit each along a real seam: a named step, or a helper whose name says what it "
        "computes (see docs/architecture.md for the run's and the commit's step names)."
    )


def test_every_module_is_at_most_500_lines() -> None:
    too_long = []
    for path in _modules():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"  {path.relative_to(LIB.parent)}: {lines} lines")
    assert not too_long, (
        f"modules longer than {MAX_MODULE_LINES} lines:\n"
        + "\n".join(too_long)
        + "\nMove a part that stands on its own (a class, or a group of helpers with one "
        "concern) into its own module of the same package."
    )
