"""The state-table rows a task hands the engine (typed columns in one struct column per
store kind), and how a batch may write them: an append (every row a key the store did not
hold), a MERGE without inserts (every row a key it held) or a full MERGE."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
from lakestate import App, Deduplicated, Materialized, StreamsBuilder
from lakestate.engine.process import (
    STATE_APPEND,
    STATE_MERGE,
    STATE_UPDATE,
    _Rows,
    _state_rows,
    out_fields,
    state_column,
    store_kinds,
)
from lakestate.engine.state_tables import write_mode
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store


def _app() -> App:
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("counts")).to_stream().to("out")
    b.stream("ids").deduplicate_by_key(timedelta(hours=1), Deduplicated.as_("seen")).to("kept")
    return App("rows", b.build(), {})


def _batch(
    app: App, store, sub: int, topic: str, keys: list[str], start: int, rows: _Rows | None = None
) -> dict:
    """Process one batch of ``keys`` and return the write verdict of its rows (added to
    ``rows``); the batch is then committed, as the engine's local apply would."""
    task = Task(app.topology, sub, 0, store, app.config, app.name)
    for i, key in enumerate(keys):
        task.process(topic, start + i, Record(key, {"n": i}, 1_000 + start + i))
    writes = list(task.transaction.changes())
    task.close()
    rows = rows if rows is not None else _Rows(out_fields(store_kinds(app)))
    verdict = _state_rows(rows, app, store, writes, sub, 0)
    with store.new_transaction() as txn:
        for namespace, key, value in writes:
            txn.put(namespace, key, value)
        txn.commit({TopicPartition(topic, 0): start + len(keys)})
    return verdict


def _sub(app: App, topic: str) -> int:
    return app.topology.subtopology_for_topic(topic, app.name).id


def test_new_keys_are_appended_held_keys_updated_and_a_mix_merged() -> None:
    app = _app()
    store = in_memory_store("0_0")
    sub = _sub(app, "in")
    assert _batch(app, store, sub, "in", ["a", "b", "a"], 0) == {"counts": STATE_APPEND}
    assert _batch(app, store, sub, "in", ["c", "b"], 3) == {"counts": STATE_MERGE}
    assert _batch(app, store, sub, "in", ["d"], 5) == {"counts": STATE_APPEND}
    assert _batch(app, store, sub, "in", ["a", "d", "a"], 6) == {"counts": STATE_UPDATE}


def test_deleting_a_held_key_is_an_update_and_an_unheld_key_gives_no_row() -> None:
    app = _app()
    store = in_memory_store("0_0")
    _batch(app, store, _sub(app, "in"), "in", ["a"], 0)
    [(held_key, _)] = list(store.iterate("counts"))
    rows = _Rows(out_fields(store_kinds(app)))
    writes = [("counts", held_key, None), ("counts", held_key + b"-never-written", None)]
    assert _state_rows(rows, app, store, writes, 0, 0) == {"counts": STATE_UPDATE}
    table = rows.table()
    assert table.column("raw_key").to_pylist() == [held_key]
    assert table.column("raw_value").to_pylist() == [None]
    assert table.column(state_column("timestamped_key_value")).to_pylist() == [None]
    rows = _Rows(out_fields(store_kinds(app)))
    assert _state_rows(rows, app, store, writes[1:], 0, 0) == {}
    assert rows.table().num_rows == 0


def test_a_store_is_written_the_way_every_task_with_rows_allows() -> None:
    assert write_mode([]) == write_mode([None, None]) == STATE_APPEND  # an empty append
    assert write_mode([None, STATE_APPEND, STATE_APPEND]) == STATE_APPEND
    assert write_mode([STATE_UPDATE, None, STATE_UPDATE]) == STATE_UPDATE
    assert write_mode([STATE_APPEND, STATE_UPDATE]) == STATE_MERGE
    assert write_mode([STATE_MERGE, STATE_APPEND]) == STATE_MERGE
    assert write_mode([STATE_UPDATE, STATE_MERGE]) == STATE_MERGE


def test_dedup_index_entries_do_not_count_and_new_ids_are_inserts() -> None:
    app = _app()
    store = in_memory_store("0_0")
    sub = _sub(app, "ids")
    assert _batch(app, store, sub, "ids", ["x", "y", "x"], 0) == {"seen": STATE_APPEND}
    # "x" again, within the interval: a duplicate, nothing written for it.
    assert _batch(app, store, sub, "ids", ["x", "z"], 3) == {"seen": STATE_APPEND}


def _state_table(rows: _Rows, kind: str) -> list[dict]:
    table: pa.Table = rows.table()
    return [
        {"store": s, **(t or {})}
        for s, t in zip(
            table.column("store").to_pylist(),
            table.column(state_column(kind)).to_pylist(),
            strict=True,
        )
    ]


def test_rows_carry_each_store_kinds_typed_columns() -> None:
    app = _app()
    assert sorted(name for name, _ in out_fields(store_kinds(app))[-2:]) == [
        state_column("dedup"),
        state_column("timestamped_key_value"),
    ]
    store = in_memory_store("0_0")
    rows = _Rows(out_fields(store_kinds(app)))
    _batch(app, store, _sub(app, "in"), "in", ["a", "b", "a"], 0, rows)
    assert _state_table(rows, "timestamped_key_value") == [
        {"store": "counts", "key": '"a"', "value": "2", "ts": 1_002},
        {"store": "counts", "key": '"b"', "value": "1", "ts": 1_001},
    ]
    rows = _Rows(out_fields(store_kinds(app)))
    _batch(app, store, _sub(app, "ids"), "ids", ["x", "y", "x"], 10, rows)
    # One row per id (not per index entry), with the first record's timestamp and offset.
    assert _state_table(rows, "dedup") == [
        {"store": "seen", "dedup_id": '"x"', "ts": 1_010, "offset": 10},
        {"store": "seen", "dedup_id": '"y"', "ts": 1_011, "offset": 11},
    ]


def test_a_batch_without_state_rows_has_no_verdict() -> None:
    app = _app()
    assert _state_rows(_Rows(), app, in_memory_store("0_0"), [], 0, 0) == {}
