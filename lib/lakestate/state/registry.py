"""Which store kind serves each store, and the contract every kind keeps. New kinds
register here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol, runtime_checkable

from lakestate.errors import TopologyException
from lakestate.serdes import DEFAULT_SERDES, JSON, Serde, TopicSerdes
from lakestate.state.dedup import DedupStore
from lakestate.state.kv import KeyValueStore
from lakestate.state.serde_checked import checked_class
from lakestate.state.stream_join import JoinBufferStore, WaitingRecordsStore
from lakestate.state.suppression_buffer import SuppressionBuffer
from lakestate.state.timestamped import TimestampedKeyValueStore
from lakestate.state.versioned import VersionedKeyValueStore
from lakestate.state.window import SessionStore, WindowStore


class StoreKind(Protocol):
    """What the engine needs of a store kind (its typed view class), and nothing else.

    ``kind``: the kind's name, kept with the store's changelog table.
    ``STATE_COLUMNS``: the changelog's typed columns, ``(name, Spark SQL type)``, besides
    ``task``, ``batch_id``, ``raw_key`` and ``raw_value``.
    ``changelog_row(raw_key, raw_value, key_serde)``: a stored entry's typed columns (a
    dict; its key's text by the store's key serde, ``serdes.changelog_text``), or None for
    an entry that ``is_index_only``.
    ``is_index_only(raw_key)``: True for a local-only entry derived from others (e.g. a
    dedup store's time index): no changelog row; the kind rebuilds it (``restore_entry``,
    or later on demand, like the dedup store's purge floor).
    ``restore_entry(txn, name, raw_key, raw_value)``: apply one changelog row (``raw_value``
    None: a tombstone) to a local store being restored or caught up;
    ``restore_entries(txn, name, entries)`` the same for many rows (one per key) at once.
    """

    kind: ClassVar[str]
    STATE_COLUMNS: ClassVar[tuple[tuple[str, str], ...]]

    @staticmethod
    def changelog_row(
        raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON
    ) -> dict[str, Any] | None: ...

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool: ...

    @staticmethod
    def restore_entry(txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None: ...

    @staticmethod
    def restore_entries(
        txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]
    ) -> None: ...


@runtime_checkable
class ColumnarRestore(Protocol):
    """What a store kind offers, besides ``StoreKind``, to restore a wiped store from Arrow
    columns at once (the engine restores any other kind through ``restore_entries``).

    ``restore_columns(raw_keys, raw_values)``: the entries that ``restore_entries`` of these
    changelog rows (Arrow binary arrays, one row per key, none a tombstone) leaves in an
    empty namespace, as (keys, values) Arrow binary arrays in any order; the engine writes
    them to the store as they are.
    """

    @staticmethod
    def restore_columns(raw_keys: Any, raw_values: Any) -> tuple[Any, Any]: ...


STORE_KINDS: dict[str, type[StoreKind]] = {
    TimestampedKeyValueStore.kind: TimestampedKeyValueStore,
    KeyValueStore.kind: KeyValueStore,
    DedupStore.kind: DedupStore,
    SuppressionBuffer.kind: SuppressionBuffer,
    WindowStore.kind: WindowStore,
    SessionStore.kind: SessionStore,
    VersionedKeyValueStore.kind: VersionedKeyValueStore,
    JoinBufferStore.kind: JoinBufferStore,
    WaitingRecordsStore.kind: WaitingRecordsStore,
}


def view_class(kind: str) -> type[StoreKind]:
    """The view class of a store kind, which keeps the ``StoreKind`` contract."""
    view = STORE_KINDS.get(kind)
    if view is None:
        raise TopologyException(f"unknown store kind {kind!r}")
    return view


def columnar_restore(kind: str) -> Callable[[Any, Any], tuple[Any, Any]] | None:
    """The ``restore_columns`` of a kind that has it (see ColumnarRestore), else None."""
    view = view_class(kind)
    return view.restore_columns if isinstance(view, ColumnarRestore) else None


def open_view(
    name: str,
    kind: str,
    options: dict[str, Any],
    source: Callable[[], Any],
    serdes: TopicSerdes = DEFAULT_SERDES,
) -> Any:
    """The typed view of store ``name`` reading and writing through ``source()``; with
    ``serdes`` other than Json, every write is checked to fit them (``serde_checked``)."""
    if kind not in STORE_KINDS:
        raise TopologyException(f"store {name!r} has unknown kind {kind!r}")
    view: Any = STORE_KINDS[kind]
    if not serdes.is_json:
        view = checked_class(view, serdes)
    return view(name, source, **options) if options else view(name, source)


def restore_entry(kind: str, txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
    """Apply one changelog row to store ``name`` of a local task store (see StoreKind)."""
    view_class(kind).restore_entry(txn, name, raw_key, raw_value)
