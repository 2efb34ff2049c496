"""The changelog rows a task hands the engine: one per changed key (a tombstone for a
delete, nothing for a store kind's index-only entries), the kind's typed columns in one
struct column per store kind, and the changelog table's rows built from them."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
from lakestate import App, Deduplicated, Materialized, StreamsBuilder
from lakestate.checkpoint import changelog
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.runtime.batch_rows import Rows, out_fields, state_rows, store_kinds
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store


def _app() -> App:
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("counts")).to_stream().to("out")
    b.stream("ids").deduplicate_by_key(timedelta(hours=1), Deduplicated.as_("seen")).to("kept")
    return App("rows", b.build(), {})


def _batch(
    app: App, store, sub: int, topic: str, keys: list[str], start: int, rows: Rows | None = None
) -> list[str]:
    """Process one batch of ``keys``, add its changelog rows to ``rows`` and return the
    stores with rows; the batch is then committed, as the engine's local apply would."""
    task = Task(app.topology, sub, 0, store, app.config, app.name)
    for i, key in enumerate(keys):
        task.process(topic, start + i, Record(key, {"n": i}, 1_000 + start + i))
    writes = list(task.transaction.changes())
    columns = task.transaction.changes_by_namespace()
    # The same writes in the same order, as columns per namespace.
    assert [(n, k, v) for n, ks, vs in columns for k, v in zip(ks, vs, strict=True)] == writes
    task.close()
    rows = rows if rows is not None else Rows(out_fields(store_kinds(app)))
    stores = state_rows(rows, app, columns, sub, 0)
    with store.new_transaction() as txn:
        for namespace, key, value in writes:
            txn.put(namespace, key, value)
        txn.commit({TopicPartition(topic, 0): start + len(keys)})
    return stores


def _sub(app: App, topic: str) -> int:
    return app.topology.subtopology_for_topic(topic, app.name).id


def _typed(rows: Rows, kind: str) -> list[dict]:
    table: pa.Table = rows.table()
    return [
        {"store": s, **(t or {})}
        for s, t in zip(
            table.column("store").to_pylist(),
            table.column(changelog.struct_column(kind)).to_pylist(),
            strict=True,
        )
    ]


def test_rows_carry_each_store_kinds_typed_columns() -> None:
    app = _app()
    assert sorted(name for name, _ in out_fields(store_kinds(app))[-2:]) == [
        changelog.struct_column("dedup"),
        changelog.struct_column("timestamped_key_value"),
    ]
    store = in_memory_store("0_0")
    rows = Rows(out_fields(store_kinds(app)))
    assert _batch(app, store, _sub(app, "in"), "in", ["a", "b", "a"], 0, rows) == ["counts"]
    assert _typed(rows, "timestamped_key_value") == [
        {"store": "counts", "key": '"a"', "value": "2", "ts": 1_002},
        {"store": "counts", "key": '"b"', "value": "1", "ts": 1_001},
    ]
    rows = Rows(out_fields(store_kinds(app)))
    _batch(app, store, _sub(app, "ids"), "ids", ["x", "y", "x"], 10, rows)
    # One row per id (not per index entry), with the first record's timestamp and offset.
    assert _typed(rows, "dedup") == [
        {"store": "seen", "dedup_id": '"x"', "ts": 1_010, "offset": 10},
        {"store": "seen", "dedup_id": '"y"', "ts": 1_011, "offset": 11},
    ]


def test_a_delete_is_a_tombstone_row() -> None:
    app = _app()
    store = in_memory_store("0_0")
    _batch(app, store, _sub(app, "in"), "in", ["a"], 0)
    [(held_key, _)] = list(store.iterate("counts"))
    rows = Rows(out_fields(store_kinds(app)))
    assert state_rows(rows, app, [("counts", [held_key], [None])], 0, 0) == ["counts"]
    table = rows.table()
    assert table.column("raw_key").to_pylist() == [held_key]
    assert table.column("raw_value").to_pylist() == [None]
    assert table.column(changelog.struct_column("timestamped_key_value")).to_pylist() == [None]


def test_a_batch_without_state_changes_has_no_rows() -> None:
    app = _app()
    rows = Rows(out_fields(store_kinds(app)))
    assert state_rows(rows, app, [], 0, 0) == []
    assert rows.table().num_rows == 0


def test_changelog_rows_are_stamped_with_each_tasks_batch() -> None:
    app = _app()
    kind = "timestamped_key_value"
    rows = Rows(out_fields(store_kinds(app)))
    for partition, keys in ((0, ["a", "b"]), (1, ["c"])):
        store = in_memory_store(f"0_{partition}")
        task = Task(app.topology, _sub(app, "in"), partition, store, app.config, app.name)
        for i, key in enumerate(keys):
            task.process("in", i, Record(key, 1, 5 + i))
        columns = task.transaction.changes_by_namespace()
        task.close()
        state_rows(rows, app, columns, _sub(app, "in"), partition)
    table = changelog.batch_rows(kind, rows.table(), {0: 7, 1: 3})
    assert table.schema == changelog.schema(kind)
    got = table.select(["task", "batch_id", "key", "value", "snapshot_through"]).to_pylist()
    assert got == [
        {"task": 0, "batch_id": 7, "key": '"a"', "value": "1", "snapshot_through": None},
        {"task": 0, "batch_id": 7, "key": '"b"', "value": "1", "snapshot_through": None},
        {"task": 1, "batch_id": 3, "key": '"c"', "value": "1", "snapshot_through": None},
    ]
    # The latest row per key wins; a tombstone hides the key.
    state = changelog.latest(
        pa.table(
            {
                "batch_id": pa.array([2, 1, 3, 1], pa.int64()),
                "raw_key": pa.array([b"k", b"k", b"j", b"j"]),
                "raw_value": pa.array([b"new", b"old", None, b"x"]),
            }
        )
    )
    assert state == {b"k": b"new", b"j": None}
