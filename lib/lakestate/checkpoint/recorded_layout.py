"""The app's sub-topologies as its last run saw them, kept in the warehouse
(``apps/<app>/_layout``, a Delta table with a row per sub-topology), so that a reader given
only the app's name (``lakestate status NAME``, the Airflow plugin) lists every task, those
of sub-topologies that never committed included, without loading the app's module.

Written by ``layout.ensure_layout`` when it differs from what is recorded (an app's first run, or
a run after its topology changed): one small overwrite, nothing on an unchanged run.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from deltalake import write_deltalake
from lakestate.io import delta_commits

SCHEMA = pa.schema(
    [
        pa.field("subtopology", pa.int32(), nullable=False),
        pa.field("inputs", pa.list_(pa.string()), nullable=False),
        pa.field("stores", pa.list_(pa.string()), nullable=False),
        pa.field("global_topics", pa.list_(pa.string()), nullable=False),
    ]
)


@dataclass(frozen=True)
class RecordedLayout:
    """Per sub-topology its input topics (real names, in input order) and its stores; the
    global tables' topics (every task reads them whole)."""

    inputs: dict[int, tuple[str, ...]]
    stores: dict[int, tuple[str, ...]]
    global_topics: tuple[str, ...] = ()

    def to_table(self) -> pa.Table:
        subs = sorted(self.inputs)
        return pa.table(
            {
                "subtopology": subs,
                "inputs": [list(self.inputs[s]) for s in subs],
                "stores": [list(self.stores.get(s, ())) for s in subs],
                "global_topics": [list(self.global_topics) for _ in subs],
            },
            schema=SCHEMA,
        )

    @classmethod
    def from_table(cls, table: pa.Table) -> RecordedLayout:
        rows = table.to_pylist()
        return cls(
            {r["subtopology"]: tuple(r["inputs"]) for r in rows},
            {r["subtopology"]: tuple(r["stores"]) for r in rows},
            tuple(rows[0]["global_topics"]) if rows else (),
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
