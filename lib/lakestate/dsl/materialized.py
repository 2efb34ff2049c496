"""Config objects for the DSL: how a result is materialized (its store's name, kind and
serdes)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from lakestate.dsl.arguments import duration_ms
from lakestate.dsl.consumed import Grouped
from lakestate.dsl.names import check_store_name
from lakestate.dsl.repartitioned import ClassOrInstance
from lakestate.errors import SerializationException, TopologyException
from lakestate.serdes import JSON, Serde, Serdes, TopicSerdes, check_serde


def checked_serde(serde: Any, where: str) -> Serde | None:
    """``serde`` checked to be a Serde or None (the default), a TopologyException naming
    ``where`` else."""
    if serde is None:
        return None
    try:
        return check_serde(serde, where)
    except SerializationException as exc:
        raise TopologyException(str(exc)) from None


@dataclass(frozen=True)
class Materialized:
    """Names the state store of a table or aggregation: ``Materialized.as_("counts")``.

    The store's Delta state table is named after it, so named stores are what SQL users
    query. Without a name, a generated one (e.g. KSTREAM-AGGREGATE-STATE-STORE-0000000002)
    is used.

    ``with_(key_serde, value_serde)``, ``with_key_serde``, ``with_value_serde``: the
    store's serdes (Kafka's). They type the store's SQL view (a String key as text, a Long
    as BIGINT, Bytes as BINARY...) and a value the serde cannot hold fails at the store.
    A serde not given (None) is the default: the one the operator implies as in Kafka (a
    count's value is Long, a grouped aggregation's key takes the Grouped key serde), else
    Json. A ``Serdes.Bytes()`` store gives back the bytes it was given (it holds them as
    base64 text: ``state/serde_checked.py``).
    """

    store_name: str | None = None
    # Set by ``as_versioned``: the store is a versioned key-value store (state/versioned.py)
    # keeping old versions this long (ms) behind its observed stream time.
    history_retention_ms: int | None = None
    # Set by ``with_retention``: how long a window store keeps a window (ms of stream time
    # after its start; Kafka's default: window size + grace, the time it closes).
    retention_ms: int | None = None
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    # Kafka's withCachingDisabled: what the store's processor forwards is not held back by
    # the record cache (statestore.cache.max.bytes), each update forwarded at once.
    caching_enabled: bool = True

    @staticmethod
    def as_(store_name: str) -> Materialized:
        check_store_name(store_name, "Materialized.as_")
        return Materialized(store_name)

    @staticmethod
    def with_defaults() -> Materialized:
        return Materialized()

    @ClassOrInstance
    def with_(self, key_serde: Serde | None, value_serde: Serde | None) -> Materialized:
        """A store with these serdes (Kafka's ``Materialized.with``): unnamed on the class,
        keeping the name on an instance (``Materialized.as_("counts").with_(k, v)``)."""
        return self.with_key_serde(key_serde).with_value_serde(value_serde)

    def with_key_serde(self, key_serde: Serde | None) -> Materialized:
        return replace(self, key_serde=checked_serde(key_serde, "Materialized key_serde"))

    def with_value_serde(self, value_serde: Serde | None) -> Materialized:
        return replace(self, value_serde=checked_serde(value_serde, "Materialized value_serde"))

    def with_caching_disabled(self) -> Materialized:
        """Every update of this store forwarded at once, whatever the record cache's size
        (Kafka's ``withCachingDisabled``)."""
        return replace(self, caching_enabled=False)

    def with_caching_enabled(self) -> Materialized:
        """The record cache holds back this store's updates (the default; Kafka's
        ``withCachingEnabled``), when ``statestore.cache.max.bytes`` is above 0."""
        return replace(self, caching_enabled=True)

    @property
    def has_serdes(self) -> bool:
        """True when a key or value serde is given."""
        return self.key_serde is not None or self.value_serde is not None

    @staticmethod
    def as_versioned(store_name: str, history_retention: timedelta) -> Materialized:
        """A named versioned key-value store (KIP-889) keeping versions ``history_retention``
        behind its observed stream time; the retention doubles as its grace period."""
        named = Materialized.as_(store_name)
        ms = duration_ms(
            history_retention, "history retention", "Materialized.as_versioned", positive=True
        )
        return replace(named, history_retention_ms=ms)

    def with_retention(self, retention: timedelta) -> Materialized:
        """A window or session store that keeps each window for ``retention`` of stream time
        after its start (sessions: after their end), closed ones included, so that its SQL
        view shows closed windows until then (Kafka's ``withRetention``). It must be at
        least the window size (session: the inactivity gap) plus grace: a window is never
        dropped before it closes. Output is unchanged."""
        ms = duration_ms(retention, "retention", "Materialized.with_retention", positive=True)
        return replace(self, retention_ms=ms)

    @property
    def is_versioned(self) -> bool:
        return self.history_retention_ms is not None

    def store_options(self) -> dict[str, Any]:
        """The store kind's options (``StoreSpec.options``, the view's constructor
        arguments) this names: the history retention of a versioned store."""
        if self.history_retention_ms is None:
            return {}
        return {"history_retention_ms": self.history_retention_ms}


def store_serdes(
    materialized: Materialized | None,
    key_default: Serde | None = None,
    value_default: Serde | None = None,
) -> TopicSerdes:
    """A store's serdes: ``materialized``'s where given, else the operator's defaults,
    else Json (Kafka's rule: the Materialized serde wins over the one the operator
    implies)."""
    key = materialized.key_serde if materialized is not None else None
    value = materialized.value_serde if materialized is not None else None
    return TopicSerdes(key or key_default or JSON, value or value_default or JSON)


def aggregate_store_serdes(
    grouped: Grouped, materialized: Materialized | None, value_default: Serde | None
) -> TopicSerdes:
    """The serdes of a grouped aggregation's store, by Kafka's rules: Materialized's, else
    the Grouped key serde and the operator's value serde (``value_default``: a count's is
    Long, a reduce's the Grouped value serde). Without any serde given (neither Grouped's
    nor Materialized's) the store stays Json, as it always was: typing is asked for."""
    given = grouped.key_serde is not None or grouped.value_serde is not None
    if not given and (materialized is None or not materialized.has_serdes):
        return TopicSerdes()
    return store_serdes(materialized, grouped.key_serde, value_default)


def count_serde() -> Serde:
    """A count's store value serde when none is given (Kafka's ``Serdes.Long()``)."""
    return Serdes.Long()
