"""Names users give stores: each names a Delta table (a folder), so they are checked once,
here, for every config object that takes one."""

from __future__ import annotations

from typing import Any

from lakestate.errors import TopologyException


def check_store_name(name: Any, what: str) -> str:
    """``name`` if it can name a store's Delta table; else a TopologyException naming
    ``what`` (e.g. ``"Materialized.as_"``) and the problem."""
    if not isinstance(name, str) or not name.strip():
        raise TopologyException(f"{what} needs a non-empty name, got {name!r}")
    for bad in "/\\ \x00":
        if bad in name:
            raise TopologyException(
                f"{what}: name {name!r} may not contain {bad!r}: it names a Delta table"
            )
    return name
