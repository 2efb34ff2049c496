"""Printing a table of text cells for a person: each column padded to its widest cell."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def print_table(
    print_line: Callable[[str], None], lines: Sequence[tuple[str, ...]], indent: str = ""
) -> None:
    """Print ``lines`` (the first is the header) as columns two spaces apart, each line
    after ``indent`` and without trailing blanks."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        print_line(
            (indent + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True))).rstrip()
        )
