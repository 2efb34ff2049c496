"""What a task hands over after processing (runtime/outcome.py): its ``TaskOutcome``
survives the trip through the processing output's typed ``outcome`` column unchanged (types
included: a count stays an int, a value set as a float stays a float),
and the driver makes the commit's ``TaskResult`` from it as the task's plan and previous
checkpoint say."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan, global_key
from lakestate.errors import StreamsException
from lakestate.processors.metrics import NODES, STORES, TaskMetrics
from lakestate.runtime.batch_rows import Rows, out_fields
from lakestate.runtime.outcome import TaskOutcome, outcomes_of
from lakestate.task_id import TaskId

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_counts = st.integers(0, 2**62)
_keys = st.tuples(st.sampled_from((NODES, STORES)), _names, _names)
_figures = st.one_of(_counts, st.floats(-1e9, 1e9))
_metrics = st.builds(
    TaskMetrics,
    st.dictionaries(_keys, _figures, max_size=3),
    st.dictionaries(_keys, _figures, max_size=3),
)
outcomes = st.builds(
    TaskOutcome,
    reached=st.dictionaries(_names, _counts, max_size=4),
    stream_time=st.integers(-(2**63), 2**63 - 1),
    records=_counts,
    metrics=_metrics,
    # a topic is there when the task output records to it (``batch_rows.output_rows``)
    output_partitions=st.dictionaries(
        _names,
        st.dictionaries(st.integers(0, 2**31 - 1), _counts, min_size=1, max_size=3),
        max_size=3,
    ),
    stores=st.lists(_names, max_size=3, unique=True).map(lambda s: tuple(sorted(s))),
    processor_metadata=st.dictionaries(_names, _counts, max_size=3),
)


# Generation and run speed depend on the machine's load (shared cores), not on what is tested.
_load_tolerant = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_load_tolerant
@given(outcomes)
def test_an_outcome_round_trips_through_its_encoding(outcome: TaskOutcome) -> None:
    decoded = TaskOutcome.decode(outcome.encode())
    assert decoded == outcome
    for got, sent in (
        (decoded.metrics.counts, outcome.metrics.counts),
        (decoded.metrics.values, outcome.metrics.values),
    ):
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in sent.items()}


@_load_tolerant
@given(st.lists(outcomes, min_size=1, max_size=4))
def test_outcomes_round_trip_through_the_processing_output(given_outcomes) -> None:
    """Each task's ``task`` row among its ``out`` rows, as a transport collects them."""
    rows = Rows(out_fields(()))
    sent = {}
    for n, outcome in enumerate(given_outcomes):
        task = TaskId(n % 2, n)
        sent[task] = outcome
        rows.add(2, kind="out", sub=task.subtopology, task=task.partition, seq=[0, 1], topic="t")
        rows.add(1, kind="task", sub=task.subtopology, task=task.partition, seq=0,
                 outcome=outcome.encode())  # fmt: skip
    table = rows.table()
    chunked = pa.concat_tables([table.slice(i, 1) for i in range(table.num_rows)])
    assert outcomes_of(chunked) == sent


def test_two_outcomes_of_one_task_are_an_error() -> None:
    rows = Rows(out_fields(()))
    outcome = TaskOutcome({}, 0, 0).encode()
    rows.add(2, kind="task", sub=0, task=1, seq=0, outcome=outcome)
    with pytest.raises(StreamsException, match="task 0_1 handed over two outcomes"):
        outcomes_of(rows.table())


def test_the_commit_record_of_an_outcome() -> None:
    """Ranges as far as the task reached, every input's offset moved on from the last
    checkpoint, and metrics totals accumulated on the checkpoint's."""
    task = TaskId(0, 1)
    g = global_key("products", 0)
    plan = TaskPlan(task, 4, {"a": (10, 20), "b": (3, 9), g: (0, 5)})
    before = TaskCheckpoint(
        3,
        {"a": 10, "b": 3, "c": 7, g: 0},
        100,
        {"k": 1},
        {"nodes": {"KSTREAM-SOURCE-0": {"process-total": 5}}},
    )
    outcome = TaskOutcome(
        reached={"a": 15, g: 5},  # stopped early: uncommitted bound
        stream_time=150,
        records=10,
        metrics=TaskMetrics({(NODES, "KSTREAM-SOURCE-0", "process-total"): 10}),
        output_partitions={"out": {0: 4, 2: 1}},
        stores=("counts",),
        processor_metadata={"k": 2},
    )
    result = outcome.result(plan, before)
    assert (result.task, result.batch_id) == (task, 4)
    assert result.ranges == {"a": (10, 15), g: (0, 5)}
    assert result.offsets == {"a": 15, "b": 3, "c": 7, g: 5}
    assert (result.stream_time, result.records) == (150, 10)
    assert result.metrics == {"nodes": {"KSTREAM-SOURCE-0": {"process-total": 15}}}
    assert result.outputs == {"out": {0: 4, 2: 1}}
    assert result.stores == ("counts",)
    assert result.processor_metadata == {"k": 2}
