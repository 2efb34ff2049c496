"""A capped plan of a task with several inputs takes the first records of the order the task
processes them in (lowest-timestamp head first, ties in input order, like Kafka's
PartitionGroup), so however ``max_records`` cuts the batches, the task sees the records in
the order one uncapped batch would."""

from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.checkpoint.batch import TaskCheckpoint
from lakestate.runtime.plan import merged_counts, plan_tasks
from lakestate.task_id import TaskId

T = TaskId(0, 0)
INPUTS = ["a", "b", "c"]


def _model_order(stamps: dict[str, list[int]]) -> list[tuple[str, int]]:
    """The plain PartitionGroup model: repeatedly the input whose head has the lowest
    timestamp (ties: input order)."""
    pos = dict.fromkeys(stamps, 0)
    order = []
    while True:
        heads = [(stamps[t][pos[t]], i, t) for i, t in enumerate(INPUTS) if pos[t] < len(stamps[t])]
        if not heads:
            return order
        _, _, topic = min(heads)
        order.append((topic, pos[topic]))
        pos[topic] += 1


def _batches(stamps: dict[str, list[int]], max_records: int | None) -> list[dict]:
    committed = TaskCheckpoint()
    ends = {t: {0: len(s)} for t, s in stamps.items()}

    def timestamps(topic: str, partition: int, start: int, end: int) -> list[int]:
        assert partition == 0 and 0 <= start <= end <= len(stamps[topic])
        return stamps[topic][start:end]

    batches = []
    while plans := plan_tasks(
        [T], {0: INPUTS}, {T: committed}, ends, max_records, (), None, timestamps
    ):
        (plan,) = plans
        assert max_records is None or plan.records <= max_records
        batches.append(plan.ranges)
        offsets = dict(committed.offsets) | {t: r[1] for t, r in plan.ranges.items()}
        committed = TaskCheckpoint(plan.batch_id, offsets)
    return batches


def _processed(stamps: dict[str, list[int]], batches: list[dict]) -> list[tuple[str, int]]:
    """What the task processes: each batch merged on its own (task_executor._in_order)."""
    order = []
    for ranges in batches:
        part = {t: stamps[t][r[0] : r[1]] for t, r in ranges.items()}
        base = {t: r[0] for t, r in ranges.items()}
        full = {t: part.get(t, []) for t in INPUTS}
        order += [(t, base[t] + i) for t, i in _model_order(full)]
    return order


stamps_strategy = st.fixed_dictionaries(
    {t: st.lists(st.integers(0, 30), max_size=12) for t in INPUTS}
)


@settings(max_examples=300, deadline=None)
@given(stamps_strategy, st.integers(1, 40))
def test_any_cap_processes_in_the_uncapped_order(stamps, max_records):
    batches = _batches(stamps, max_records)
    assert _processed(stamps, batches) == _model_order(stamps)
    assert sum(r[1] - r[0] for b in batches for r in b.values()) == sum(map(len, stamps.values()))


def test_merged_counts_takes_the_lowest_heads_first():
    # a's 50 is ahead of all of b: a capped batch must not run a to its end first.
    assert merged_counts([[1, 2, 50, 51], [3, 4, 5]], 4) == [2, 2]
    assert merged_counts([[5], [5]], 1) == [1, 0]  # ties: input order
    assert merged_counts([[9, 1], [5]], 2) == [1, 1]  # heads only: 5 < 9, then 9
    assert merged_counts([[], [1]], 3) == [0, 1]
