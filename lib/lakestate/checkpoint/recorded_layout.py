"""The app's sub-topologies as its last run saw them, kept in the warehouse
(``apps/<app>/_layout``, a Delta table with a row per sub-topology), so that a reader given
only the app's name (``lakestate status NAME``, the Airflow plugin) lists every task, those
of sub-topologies that never committed included, without loading the app's module; and
its stores' serdes, by which the stores' SQL views type their key and value columns
(``read.views``). A layout recorded before serdes were has no serde columns: Json.

Written by ``layout.ensure_layout`` when it differs from what is recorded (an app's first run, or
a run after its topology changed): one small overwrite, nothing on an unchanged run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import write_deltalake
from lakestate.io import delta_commits

SCHEMA = pa.schema(
    [
        pa.field("subtopology", pa.int32(), nullable=False),
        pa.field("inputs", pa.list_(pa.string()), nullable=False),
        pa.field("stores", pa.list_(pa.string()), nullable=False),
        pa.field("global_topics", pa.list_(pa.string()), nullable=False),
        # Per store (in ``stores``' order) its key and value serde's name (Serde.name).
        pa.field("store_key_serdes", pa.list_(pa.string()), nullable=False),
        pa.field("store_value_serdes", pa.list_(pa.string()), nullable=False),
    ]
)
JSON_NAME = "Serdes.Json()"


@dataclass(frozen=True)
class RecordedLayout:
    """Per sub-topology its input topics (real names, in input order) and its stores; the
    global tables' topics (every task reads them whole); ``store_serdes``: the stores whose
    serdes are not Json, each with its key and value serde's name (``Serde.name``)."""

    inputs: dict[int, tuple[str, ...]]
    stores: dict[int, tuple[str, ...]]
    global_topics: tuple[str, ...] = ()
    store_serdes: dict[str, tuple[str, str]] = field(default_factory=dict)

    def to_table(self) -> pa.Table:
        subs = sorted(self.inputs)
        stores = [list(self.stores.get(s, ())) for s in subs]
        serdes = [[self.store_serdes.get(n, (JSON_NAME, JSON_NAME)) for n in ns] for ns in stores]
        return pa.table(
            {
                "subtopology": subs,
                "inputs": [list(self.inputs[s]) for s in subs],
                "stores": stores,
                "global_topics": [list(self.global_topics) for _ in subs],
                "store_key_serdes": [[k for k, _ in pairs] for pairs in serdes],
                "store_value_serdes": [[v for _, v in pairs] for pairs in serdes],
            },
            schema=SCHEMA,
        )

    @classmethod
    def from_table(cls, table: pa.Table) -> RecordedLayout:
        rows = table.to_pylist()
        store_serdes = {}
        for r in rows:
            keys, values = r.get("store_key_serdes") or [], r.get("store_value_serdes") or []
            for store, key, value in zip(r["stores"], keys, values, strict=False):
                if (key, value) != (JSON_NAME, JSON_NAME):
                    store_serdes[store] = (key, value)
        return cls(
            {r["subtopology"]: tuple(r["inputs"]) for r in rows},
            {r["subtopology"]: tuple(r["stores"]) for r in rows},
            tuple(rows[0]["global_topics"]) if rows else (),
            store_serdes,
        )


def read(path: str) -> RecordedLayout | None:
    """The layout recorded at ``path`` (None: the app has not run since layouts were
    recorded)."""
    if not delta_commits.table_exists(path):
        return None
    return RecordedLayout.from_table(delta_commits.open_table(path).to_pyarrow_table())


def record(path: str, layout: RecordedLayout) -> None:
    """Record ``layout`` unless it is recorded already. Two runs recording the same layout
    at once are fine (the loser finds it recorded); a different one recorded meanwhile is
    replaced by the next run's."""
    if read(path) == layout:
        return
    try:
        write_deltalake(
            path.removeprefix("file://"),
            layout.to_table(),
            mode="overwrite",
            schema_mode="overwrite",
            description="lakestate: the app's sub-topologies as its last run saw them",
        )
    except Exception:
        if read(path) != layout:
            raise


__all__ = ["RecordedLayout", "read", "record"]
