"""Property: rows appended to a Delta table in random commits, with OPTIMIZE and skipped
deletes between them, read by runs at random points as the engine reads a topic (from
the committed offsets to the end offsets, each partition capped at a random count, the
offsets reached committed): every appended row is read exactly once, in append order per
partition, against a plain model (the rows in order, split by their key's partition)."""

from __future__ import annotations

import tempfile

import lakestate as ls
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lakestate.io import topics
from lakestate.io.deltasource import declare, offsets
from lakestate.io.partitioner import partition_for
from lakestate.io.topic_records import records_of
from lakestate.warehouse import Warehouse

PARTITIONS = 3

commit = st.one_of(
    st.tuples(st.just("append"), st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=6)),
    st.tuples(st.just("optimize"), st.none()),
    st.tuples(st.just("delete"), st.none()),
    st.tuples(st.just("run"), st.integers(min_value=1, max_value=4)),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(commit, min_size=1, max_size=14), st.booleans())
def test_each_appended_row_is_read_once_in_order(steps, forget_cache):
    with tempfile.TemporaryDirectory() as tmp:
        table, wh = f"{tmp}/bronze", Warehouse(f"{tmp}/wh")
        # The table exists before the source (an empty first commit: a schema only).
        schema = pa.schema([("id", pa.string()), ("seq", pa.int64())])
        DeltaTable.create(table, schema)
        source = ls.DeltaSource(
            "t", table, key="id", partitions=PARTITIONS, skip_change_commits=True
        )
        declare(wh, source)
        appended: list[tuple[str, int]] = []  # the model: every row appended, in order
        read: dict[int, list[tuple[int, str, int]]] = {p: [] for p in range(PARTITIONS)}
        committed = dict.fromkeys(range(PARTITIONS), 0)

        def run(cap: int) -> None:
            if forget_cache:
                offsets._CACHE.clear()
            topic = topics.topic(wh, "t")  # a new run: a new topic object
            ends = topic.end_offsets()
            ranges = {p: (committed[p], min(ends[p], committed[p] + cap)) for p in ends}
            for r in records_of(topic.reader().read_range(ranges)):
                read[r.partition].append((r.offset, r.key, r.value["seq"]))
            committed.update({p: end for p, (_, end) in ranges.items()})

        for kind, arg in steps:
            if kind == "append":
                rows = [(k, len(appended) + i) for i, k in enumerate(arg)]
                appended.extend(rows)
                write_deltalake(
                    table,
                    pa.table({"id": [k for k, _ in rows], "seq": [s for _, s in rows]}, schema),
                    mode="append",
                )
            elif kind == "optimize":
                DeltaTable(table).optimize.compact()
            elif kind == "delete" and appended:
                # Deletes an already appended row: the commit is skipped, the row was read
                # (or will be, from the version that appended it) once.
                DeltaTable(table).delete(f"seq = {appended[0][1]}")
            elif kind == "run":
                run(arg)
        while True:  # the last runs catch up
            before = dict(committed)
            run(10**6)
            if committed == before:
                break
        for p in range(PARTITIONS):
            model = [(k, s) for k, s in appended if partition_for(k, PARTITIONS) == p]
            got = read[p]
            assert [o for o, _, _ in got] == list(range(len(model)))
            assert [(k, s) for _, k, s in got] == model
