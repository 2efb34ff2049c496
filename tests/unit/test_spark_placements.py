"""``Placements.plan``: each batch's tasks over the live executors, balanced per core and as
sticky as the balance allows, checked against a brute-force model over every assignment."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.runtime.spark_located import Placements
from lakestate.task_id import TaskId


def _placements(where: dict[TaskId, str]) -> Placements:
    placements = Placements()
    placements.where.update(where)
    return placements


def _balanced(counts: dict[str, int], live: dict[str, int], tasks: int) -> bool:
    """Every core holds ``tasks // cores`` tasks or one more (an executor's tasks spread
    over its cores)."""
    base, extra = divmod(tasks, sum(live.values()))
    over = 0
    for executor, cores in live.items():
        above = counts.get(executor, 0) - base * cores
        if not 0 <= above <= cores:
            return False
        over += above
    return over == extra


def _most_kept(tasks, where, live) -> int:
    """The model: the most tasks that can stay where they ran last, over every balanced
    assignment of the tasks to the live executors."""
    best = -1
    executors = sorted(live)
    for choice in itertools.product(executors, repeat=len(tasks)):
        counts = {e: choice.count(e) for e in executors}
        if _balanced(counts, live, len(tasks)):
            best = max(best, sum(where.get(t) == e for t, e in zip(tasks, choice, strict=True)))
    return best


def test_a_first_batch_spreads_its_tasks_over_the_executors():
    tasks = [TaskId(0, 0), TaskId(0, 1)]
    live = {"executor_127.0.0.1_0": 1, "executor_127.0.0.1_1": 1}
    assert sorted(Placements().plan(tasks, live).values()) == sorted(live)


def test_tasks_that_all_ran_on_one_executor_are_spread_keeping_as_many_as_fit():
    a, b = "executor_h_0", "executor_h_1"
    tasks = [TaskId(0, p) for p in range(4)]
    plan = _placements(dict.fromkeys(tasks, a)).plan(tasks, {a: 1, b: 1})
    assert plan == {tasks[0]: a, tasks[1]: a, tasks[2]: b, tasks[3]: b}


def test_a_lost_executors_tasks_move_and_the_others_stay():
    a, b, c = "executor_h_0", "executor_h_1", "executor_h_2"
    tasks = [TaskId(0, p) for p in range(3)]
    plan = _placements({tasks[0]: a, tasks[1]: b, tasks[2]: c}).plan(tasks, {a: 1, b: 1})
    assert plan[tasks[0]] == a and plan[tasks[1]] == b and plan[tasks[2]] in (a, b)


def test_a_task_takes_a_slot_above_its_cores_share_only_after_every_share_is_filled():
    # 5 tasks over 4 cores: one core gets 2. Task 2 must not take d's second slot on core 0
    # while core 1 is empty, or task 3 (which ran on b) could not stay (hypothesis found it).
    t = [TaskId(p % 2, p) for p in range(5)]
    where = {t[0]: "b", t[1]: "d", t[2]: "d", t[3]: "b"}
    plan = _placements(where).plan(t, {"a": 1, "b": 1, "d": 2})
    assert all(plan[task] == e for task, e in where.items()) and plan[t[4]] == "a"


def test_without_listed_executors_each_task_keeps_its_last_place():
    tasks = [TaskId(0, 0), TaskId(0, 1)]
    placements = _placements({tasks[0]: "executor_h_driver"})
    assert placements.plan(tasks, {}) == {tasks[0]: "executor_h_driver"}


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.dictionaries(st.sampled_from("abcd"), st.integers(1, 2), min_size=1, max_size=3),
    st.data(),
)
def test_the_plan_is_balanced_and_keeps_as_many_tasks_as_any_balanced_plan(n, live, data):
    tasks = [TaskId(p % 2, p) for p in range(n)]
    where = data.draw(
        st.dictionaries(st.sampled_from(tasks), st.sampled_from("abcde")), label="where"
    )
    plan = _placements(where).plan(tasks, live)
    assert set(plan) == set(tasks) and set(plan.values()) <= set(live)
    counts = {e: list(plan.values()).count(e) for e in live}
    assert _balanced(counts, live, n), (plan, counts)
    kept = sum(where.get(t) == e for t, e in plan.items())
    assert kept == _most_kept(tasks, where, live)
