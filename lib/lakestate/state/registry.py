"""Which typed view serves each store kind. New store kinds register here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.errors import TopologyException
from lakestate.state.dedup import DedupStore
from lakestate.state.timestamped import TimestampedKeyValueStore

STORE_VIEWS: dict[str, type] = {
    TimestampedKeyValueStore.kind: TimestampedKeyValueStore,
    DedupStore.kind: DedupStore,
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


# Optional parts of a view class's contract, for stores that keep derived local-only entries
# (e.g. the dedup store's time index): ``is_index_only(raw_key)`` says an entry is not a
# state-table row (``changelog_row`` returns None for it), and ``restore_entry(txn, name,
# raw_key, raw_value)`` applies a state-table row to a local store, rebuilding those entries.


def index_only_check(kind: str) -> Callable[[bytes], bool] | None:
    """The ``is_index_only`` of a ``kind`` store, None when it keeps no local-only entries
    (resolved once, for callers that check many entries)."""
    return getattr(view_class(kind), "is_index_only", None)


def is_index_only(kind: str, raw_key: bytes) -> bool:
    """True when the entry ``raw_key`` of a ``kind`` store is local-only: no Delta row."""
    check = index_only_check(kind)
    return check is not None and check(raw_key)


def restore_entry(kind: str, txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
    """Apply one state-table row (``raw_value`` None: deleted) to store ``name`` of a local
    task store being restored or caught up from Delta, through ``txn``."""
    restore = getattr(view_class(kind), "restore_entry", None)
    if restore is None:
        txn.put(name, raw_key, raw_value)
    else:
        restore(txn, name, raw_key, raw_value)
