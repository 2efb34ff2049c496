"""Which typed view serves each store kind. New store kinds register here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.errors import TopologyException
from lakestate.state.timestamped import TimestampedKeyValueStore

STORE_VIEWS: dict[str, type] = {
    TimestampedKeyValueStore.kind: TimestampedKeyValueStore,
}


def open_view(name: str, kind: str, options: dict[str, Any], source: Callable[[], Any]) -> Any:
    """The typed view of store ``name`` reading and writing through ``source()``."""
    view = STORE_VIEWS.get(kind)
    if view is None:
        raise TopologyException(f"store {name!r} has unknown kind {kind!r}")
    if options:
        return view(name, source, **options)
    return view(name, source)


def view_class(kind: str) -> type:
    """The view class of a store kind: it also names the typed columns of its state table
    (``STATE_COLUMNS``) and turns a stored entry into them (``changelog_row``)."""
    view = STORE_VIEWS.get(kind)
    if view is None:
        raise TopologyException(f"unknown store kind {kind!r}")
    return view
