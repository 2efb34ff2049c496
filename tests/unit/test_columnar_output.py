"""The count's output carried as columns after the aggregate (processors/columns.py):
``to_stream`` and a JSON sink take the columns and the sink's ``OutputBlock`` reaches the
batch's out rows without a record per record (runtime/batch_rows.output_rows). Against the
per-record path, over random batches (keys of every kind, null keys and values, random
partition counts, state carried over): the same out rows (seq, topic, partition, pseq,
timestamp, key, value, headers), the same counts per partition, the same records handed to
the driver, the same metrics; for a plan whose sinks write one topic (sorted outputs), a
fan-out and a node after ``to_stream`` that reads records."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Materialized, Produced, Serdes, StreamsBuilder
from lakestate.processors import columnar_count
from lakestate.processors.columns import Columns
from lakestate.processors.output import OutputBlock, outputs_of
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.runtime.batch_rows import OUT_FIELDS, Rows, output_rows
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store

SETTINGS = settings(max_examples=60, deadline=None, database=None)

KEYS = st.one_of(
    st.none(),
    st.sampled_from(["a", "b", "ä", "", "x" * 9, 0, 7, -3, 2**40, True, 1.5, ("t", 1)]),
)
VALUES = st.one_of(st.none(), st.integers(0, 3))
TIMESTAMPS = st.one_of(st.integers(0, 50), st.integers(0, 2**40))
BATCHES = st.lists(st.lists(st.tuples(KEYS, VALUES, TIMESTAMPS), max_size=70), max_size=3)
SHAPES = ("plain", "fan_out", "one_topic", "mapped", "serdes")


def _topology(shape: str):
    b = StreamsBuilder()
    counts = b.stream("in").group_by_key().count(Materialized.as_("counts"))
    if shape == "serdes":  # not JSON: the sink takes records
        counts.to_stream().to("out", Produced.with_(Serdes.Json(), Serdes.Long()))
        return b.build()
    counts.to_stream().to("out")
    if shape == "fan_out":
        counts.to_stream().to("other")
    elif shape == "one_topic":  # two sinks of one topic: their outputs are sorted
        counts.to_stream().to("out")
    elif shape == "mapped":
        counts.to_stream().map_values(lambda v: [v]).to("other")
    return b.build()


def _run(batches: list[list[tuple]], shape: str, partitions: int, columnar: bool) -> tuple:
    """Each batch as one chunk, the count on columns or (not ``columnar``) record by
    record, committed after each: the out rows, counts, records and metrics."""
    task = Task(_topology(shape), 0, 0, in_memory_store("0_0"), {}, "app")
    offset, tables, counts, records, blocks = 0, [], [], [], 0
    for rows in batches:
        batch = [Record(k, v, ts) for k, v, ts in rows]
        columnar_count.MIN_RECORDS = 1 if columnar else 10**9
        assert task.process_chunk("in", list(range(offset, offset + len(rows))), batch)
        offset += len(rows)
        prepared = task.prepare_commit({TopicPartition("in", 0): offset})
        blocks += sum(type(o) is OutputBlock for o in prepared.output)
        out = Rows(OUT_FIELDS)
        counts.append(
            output_rows(out, prepared.output, 0, 0, {"out": partitions, "other": partitions})
        )
        tables.append(out.table().drop(["outcome"]).to_pylist())
        task.complete_commit(prepared)
        records += task.pending_output()
        task.post_commit()
    return (tables, counts, records, task.metrics.document()), blocks


@pytest.fixture(autouse=True)
def _min_records():
    before = columnar_count.MIN_RECORDS
    yield
    columnar_count.MIN_RECORDS = before


@SETTINGS
@given(batches=BATCHES, shape=st.sampled_from(SHAPES), partitions=st.integers(1, 5))
def test_out_rows_from_columns_are_those_record_by_record(batches, shape, partitions):
    columnar, blocks = _run(batches, shape, partitions, columnar=True)
    one_by_one, none = _run(batches, shape, partitions, columnar=False)
    assert columnar == one_by_one
    assert none == 0
    counted = any(k is not None and v is not None for rows in batches for k, v, _ in rows)
    # The columns reach the out rows where the sink takes them: a JSON sink whose output
    # is not sorted with another's.
    assert (blocks > 0) == (counted and shape in ("plain", "fan_out", "mapped"))


@SETTINGS
@given(
    keys=st.lists(st.sampled_from(["a", "é", 3, -1, 1.5, (1, 2), None, True]), max_size=40),
    values=st.one_of(
        st.lists(st.integers(-(2**62), 2**62), min_size=40, max_size=40),
        st.lists(st.one_of(st.none(), st.text(max_size=3), st.integers()), min_size=40),
    ),
)
def test_a_block_is_the_outputs_of_its_records(keys, values):
    """Block by block: its records' outputs and its rows are ``outputs_of`` the records."""
    n = len(keys)
    slots: dict = {}
    ids = np.array([slots.setdefault((type(k), k), len(slots)) for k in keys], np.int64)
    group_keys = [k for _, k in slots]
    # Values all int64 ints go as an array (their texts made by Arrow), others as a list.
    ints = n > 0 and all(type(v) is int and abs(v) < 2**63 for v in values[:n])
    column = np.array(values[:n], np.int64) if ints else values[:n]
    timestamps = np.arange(n, dtype=np.int64) * 3
    columns = Columns(keys, ids, group_keys, column, None, timestamps)
    block = OutputBlock.of("t", columns)
    assert block is not None
    records = columns.records()
    assert records == [
        Record(k, v, 3 * i) for i, (k, v) in enumerate(zip(keys, values, strict=False))
    ]
    assert block.outputs() == outputs_of("t", records, None)
    by_block, by_records = Rows(OUT_FIELDS), Rows(OUT_FIELDS)
    assert output_rows(by_block, [block], 1, 2, {"t": 3}) == output_rows(
        by_records, outputs_of("t", records, None), 1, 2, {"t": 3}
    )
    assert by_block.table().equals(by_records.table())
