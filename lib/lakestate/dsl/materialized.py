"""Config objects for the DSL: how a result is materialized."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from lakestate.dsl.arguments import duration_ms
from lakestate.dsl.names import check_store_name


@dataclass(frozen=True)
class Materialized:
    """Names the state store of a table or aggregation: ``Materialized.as_("counts")``.

    The store's Delta state table is named after it, so named stores are what SQL users
    query. Without a name, a generated one (e.g. KSTREAM-AGGREGATE-STATE-STORE-0000000002)
    is used.
    """

    store_name: str | None = None
    # Set by ``as_versioned``: the store is a versioned key-value store (state/versioned.py)
    # keeping old versions this long (ms) behind its observed stream time.
    history_retention_ms: int | None = None
    # Set by ``with_retention``: how long a window store keeps a window (ms of stream time
    # after its start; Kafka's default: window size + grace, the time it closes).
    retention_ms: int | None = None

    @staticmethod
    def as_(store_name: str) -> Materialized:
        check_store_name(store_name, "Materialized.as_")
        return Materialized(store_name)

    @staticmethod
    def with_defaults() -> Materialized:
        return Materialized()

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
