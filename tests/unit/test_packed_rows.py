"""A task's rows on their way back from a worker process (``inprocess.PackedRows``): the same
table after the trip, its null ``outcome`` chunks sent as lengths."""

from __future__ import annotations

import pickle

import pyarrow as pa
from lakestate.runtime.batch_rows import OUTCOME_COLUMN, Rows, out_fields
from lakestate.runtime.inprocess import PackedRows
from lakestate.runtime.outcome import TaskOutcome


def _rows(n: int) -> pa.Table:
    rows = Rows(out_fields(["dedup"]))
    rows.add(n, kind="out", sub=0, task=1, seq=list(range(n)), topic="t", key=["k"] * n)
    outcome = TaskOutcome(reached={"in": n}, stream_time=5, records=n)
    rows.add(1, kind="task", sub=0, task=1, seq=0, outcome=outcome.encode())
    return rows.table()


def test_the_rows_come_back_equal_and_the_null_outcomes_cost_nothing() -> None:
    table = _rows(20_000)
    packed = PackedRows.of(table)
    # The out rows' outcome chunk (all null) goes as its length; the task row's as it is.
    assert packed.columns[table.column_names.index(OUTCOME_COLUMN)][0] == 20_000
    back = pickle.loads(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL))
    assert back.table().equals(table)
    assert (
        back.table().column(OUTCOME_COLUMN).to_pylist() == table.column(OUTCOME_COLUMN).to_pylist()
    )
    sent = len(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL))
    assert sent < len(pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL)) / 2
