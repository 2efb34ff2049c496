"""Config objects for the DSL: how a result is materialized."""

from __future__ import annotations

from dataclasses import dataclass

from lakestate.errors import TopologyException


@dataclass(frozen=True)
class Materialized:
    """Names the state store of a table or aggregation: ``Materialized.as_("counts")``.

    The store's Delta state table is named after it, so named stores are what SQL users
    query. Without a name, a generated one (e.g. KSTREAM-AGGREGATE-STATE-STORE-0000000002)
    is used.
    """

    store_name: str | None = None

    @staticmethod
    def as_(store_name: str) -> Materialized:
        if not isinstance(store_name, str) or not store_name.strip():
            raise TopologyException(
                f"Materialized.as_ needs a non-empty store name, got {store_name!r}"
            )
        for bad in "/\\ \x00":
            if bad in store_name:
                raise TopologyException(
                    f"store name {store_name!r} may not contain {bad!r}: it names a Delta table"
                )
        return Materialized(store_name)

    @staticmethod
    def with_defaults() -> Materialized:
        return Materialized()
