"""Stores for the Processor API (Kafka's ``Stores``): a supplier names a store, a builder
says how processors see it; ``StreamsBuilder.add_state_store(builder)`` adds it and
``KStream.process(supplier, name)`` connects it.

Every store is persistent and transactional, whatever its supplier's name: RocksDB locally,
writes staged and committed with the batch (KIP-892), a Delta changelog table and a SQL
view per store. So ``in_memory_*`` suppliers give the same store as ``persistent_*`` ones.

A builder's ``key_serde`` and ``value_serde`` are the store's serdes, as Kafka's
``Stores.*StoreBuilder(supplier, keySerde, valueSerde)``: a store built with them is the
store ``Materialized.with_(key_serde, value_serde)`` gives a DSL operator (the same
``StoreSpec.serdes``): a put its serdes cannot hold fails, naming the store and serde,
before anything is written; a Bytes value is given back as bytes; the SQL view shows a
String key as text, a Long value as a number, Bytes as binary. A serde not given (None,
Kafka's null) is the default, Json (a window store's key serde is its windows' key's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from lakestate.dsl.arguments import duration_ms
from lakestate.dsl.materialized import Materialized, checked_serde, store_serdes
from lakestate.dsl.names import check_store_name
from lakestate.errors import TopologyException
from lakestate.serdes import Serde, base_key_serde
from lakestate.state.kv import KeyValueStore
from lakestate.state.timestamped import TimestampedKeyValueStore
from lakestate.state.versioned import VersionedKeyValueStore
from lakestate.state.window import WindowStore
from lakestate.topology.graph import StoreSpec

_KEY_VALUE = "key value"
_WINDOW = "window"
_VERSIONED = "versioned"


@dataclass(frozen=True)
class StoreSupplier:
    """A named store of one family (key-value, window, versioned) and its options."""

    name: str
    family: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreBuilder:
    """What ``add_state_store`` takes: the store's spec (name, kind, options)."""

    spec: StoreSpec

    @property
    def name(self) -> str:
        return self.spec.name

    def with_caching_enabled(self) -> StoreBuilder:
        """Accepted for Kafka's API: the record cache (``statestore.cache.max.bytes``) holds
        back what the DSL's aggregations and tables forward; a user processor forwards what
        it forwards, so caching its store would change nothing anyone sees."""
        return self

    def with_caching_disabled(self) -> StoreBuilder:
        return self

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> StoreBuilder:
        """Accepted for Kafka's API: every store has its changelog table."""
        return self

    def with_logging_disabled(self) -> StoreBuilder:
        raise TopologyException(
            f"store {self.name!r}: with_logging_disabled is not supported: every lakestate "
            "store has a changelog table, which restores it and which SQL reads"
        )


def _supplier(name: Any, family: str, what: str, **options: Any) -> StoreSupplier:
    return StoreSupplier(check_store_name(name, f"Stores.{what}"), family, options)


def _builder(
    supplier: Any, family: str, kind: str, what: str, key_serde: Any, value_serde: Any
) -> StoreBuilder:
    if not isinstance(supplier, StoreSupplier) or supplier.family != family:
        raise TopologyException(
            f"Stores.{what} takes a {family} store supplier (e.g. Stores.persistent_"
            f"{family.replace(' ', '_')}_store(name)), got {supplier!r}"
        )
    key_serde = checked_serde(key_serde, f"Stores.{what} key_serde")
    value_serde = checked_serde(value_serde, f"Stores.{what} value_serde")
    # Materialized's defaults, so that a builder's store has a DSL store's serdes.
    serdes = store_serdes(Materialized.with_(key_serde, value_serde))
    return StoreBuilder(StoreSpec(supplier.name, kind, dict(supplier.options), serdes=serdes))


class Stores:
    """Factories of store suppliers and builders, named as Kafka's (snake_case)."""

    @staticmethod
    def persistent_key_value_store(name: str) -> StoreSupplier:
        return _supplier(name, _KEY_VALUE, "persistent_key_value_store")

    @staticmethod
    def persistent_timestamped_key_value_store(name: str) -> StoreSupplier:
        return _supplier(name, _KEY_VALUE, "persistent_timestamped_key_value_store")

    @staticmethod
    def in_memory_key_value_store(name: str) -> StoreSupplier:
        """The same store as ``persistent_key_value_store`` (see the module docstring)."""
        return _supplier(name, _KEY_VALUE, "in_memory_key_value_store")

    @staticmethod
    def persistent_versioned_key_value_store(
        name: str, history_retention: timedelta
    ) -> StoreSupplier:
        """A versioned store (KIP-889) keeping versions ``history_retention`` behind its
        observed stream time."""
        what = "persistent_versioned_key_value_store"
        ms = duration_ms(history_retention, "history retention", f"Stores.{what}", positive=True)
        return _supplier(name, _VERSIONED, what, history_retention_ms=ms)

    @staticmethod
    def persistent_window_store(
        name: str, retention_period: timedelta, window_size: timedelta, retain_duplicates: bool
    ) -> StoreSupplier:
        """A window store of windows ``window_size`` long, keeping Kafka's retention: a
        window starting ``retention_period`` or more before the latest window start put is
        expired (deleted, and a put of it dropped). Duplicates are not retained."""
        what = "persistent_window_store"
        retention = duration_ms(retention_period, "retention period", f"Stores.{what}")
        size = duration_ms(window_size, "window size", f"Stores.{what}", positive=True)
        if retain_duplicates:
            raise TopologyException(
                f"Stores.{what}({name!r}): retain_duplicates=True is not supported; a window "
                "holds one value per key"
            )
        if retention < size:
            raise TopologyException(
                f"Stores.{what}({name!r}): the retention period ({retention} ms) must be at "
                f"least the window size ({size} ms)"
            )
        return _supplier(name, _WINDOW, what, retention_ms=retention, window_size_ms=size)

    @staticmethod
    def key_value_store_builder(
        supplier: StoreSupplier, key_serde: Serde | None = None, value_serde: Serde | None = None
    ) -> StoreBuilder:
        """A ``KeyValueStore`` (get/put/delete/range/all) for processors, its keys and values
        held by ``key_serde`` and ``value_serde`` (None: Json; module docstring)."""
        what = "key_value_store_builder"
        return _builder(supplier, _KEY_VALUE, KeyValueStore.kind, what, key_serde, value_serde)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: StoreSupplier, key_serde: Serde | None = None, value_serde: Serde | None = None
    ) -> StoreBuilder:
        """A ``TimestampedKeyValueStore``: ``put(key, value, timestamp)``,
        ``get_with_timestamp(key)``; serdes as ``key_value_store_builder``."""
        what, kind = "timestamped_key_value_store_builder", TimestampedKeyValueStore.kind
        return _builder(supplier, _KEY_VALUE, kind, what, key_serde, value_serde)

    @staticmethod
    def versioned_key_value_store_builder(
        supplier: StoreSupplier, key_serde: Serde | None = None, value_serde: Serde | None = None
    ) -> StoreBuilder:
        """A ``VersionedKeyValueStore``: ``put(key, value, timestamp)``,
        ``get(key, as_of)``, ``delete(key, timestamp)``; serdes as
        ``key_value_store_builder``."""
        what, kind = "versioned_key_value_store_builder", VersionedKeyValueStore.kind
        return _builder(supplier, _VERSIONED, kind, what, key_serde, value_serde)

    @staticmethod
    def window_store_builder(
        supplier: StoreSupplier, key_serde: Serde | None = None, value_serde: Serde | None = None
    ) -> StoreBuilder:
        """A ``WindowStore``: ``put(key, window, value, timestamp)``, ``fetch``, ``all``;
        ``key_serde`` is the serde of the windows' keys (Kafka's), not a windowed serde."""
        what = "window_store_builder"
        if isinstance(key_serde, Serde) and base_key_serde(key_serde) is not key_serde:
            raise TopologyException(
                f"Stores.{what}: key_serde is the serde of the windows' keys (e.g. "
                f"Serdes.String()), not a windowed serde: got {key_serde.name}"
            )
        return _builder(supplier, _WINDOW, WindowStore.kind, what, key_serde, value_serde)
