"""The KIP-441 assignor: seed 003's scenarios, Kafka's HighAvailabilityTaskAssignorTest cases
in our types, the config and the errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from lakestate.assign import Assignment, AssignorConfig, ClientState, assign
from lakestate.task_id import TaskId


def tasks_of(subtopologies: int, partitions: int) -> list[TaskId]:
    return [TaskId(s, p) for s in range(subtopologies) for p in range(partitions)]


def owned(assignment: Assignment, client: str) -> set[TaskId]:
    return {t for t, c in assignment.active.items() if c == client}


def warming(assignment: Assignment, client: str) -> set[TaskId]:
    return {t for t, cs in assignment.warmup.items() if client in cs}


def standing_by(assignment: Assignment, client: str) -> set[TaskId]:
    return {t for t, cs in assignment.standby.items() if client in cs}


def caught_up_on(tasks, lag: int = 0) -> dict[TaskId, int]:
    return dict.fromkeys(tasks, lag)


def counts(assignment: Assignment) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in assignment.active.values():
        out[c] = out.get(c, 0) + 1
    return out


def one_round(clients: dict[str, ClientState], out: Assignment) -> dict[str, ClientState]:
    """Lags after a round in which actives, warmups and standbys caught up fully."""
    lags = {n: dict(s.lags) for n, s in clients.items()}
    for t, a in out.active.items():
        lags[a][t] = 0
    for roles in (out.warmup, out.standby):
        for t, cs in roles.items():
            for c in cs:
                lags[c][t] = 0
    return {n: ClientState(lags[n], s.capacity) for n, s in clients.items()}


# --- seed 003's scenarios -------------------------------------------------------------------


def test_first_assignment_is_balanced_with_nothing_to_warm_up() -> None:
    tasks = tasks_of(2, 4)
    clients = {n: ClientState() for n in "abc"}
    out = assign(tasks, clients, None, AssignorConfig())
    assert sorted(counts(out).values()) == [2, 3, 3]
    assert not out.warmup and not out.standby and not out.probing_rebalance_needed


def test_scale_up_the_new_instance_warms_up_first_then_takes_over() -> None:
    tasks = tasks_of(2, 4)
    before = Assignment(active={t: "a" if t.subtopology == 0 else "b" for t in tasks})
    clients = {
        "a": ClientState(caught_up_on(owned(before, "a"))),
        "b": ClientState(caught_up_on(owned(before, "b"))),
        "c": ClientState(),  # the new instance: no state
    }
    config = AssignorConfig(max_warmup_replicas=2)

    first = assign(tasks, clients, before, config)
    assert first.active == before.active  # nothing moves to an instance with no state
    assert len(warming(first, "c")) == 2 and first.probing_rebalance_needed
    assert not warming(first, "a") and not warming(first, "b")

    clients = one_round(clients, first)  # the warmups caught up
    second = assign(tasks, clients, first, config)
    assert owned(second, "c") == warming(first, "c")  # active only where it warmed up
    assert sorted(counts(second).values()) == [2, 3, 3]
    assert not second.probing_rebalance_needed and not second.warmup
    # the old owners kept the rest
    assert owned(second, "a") | owned(second, "b") == set(tasks) - warming(first, "c")

    clients = one_round(clients, second)
    assert assign(tasks, clients, second, config) == second  # and it stays put


def test_scale_up_moves_at_most_max_warmup_replicas_per_round() -> None:
    tasks = tasks_of(1, 8)
    before = Assignment(active=dict.fromkeys(tasks, "a"))
    clients = {"a": ClientState(caught_up_on(tasks)), "b": ClientState(), "c": ClientState()}
    config = AssignorConfig(max_warmup_replicas=1)
    out, rounds = before, 0
    moved_after_warmup = True
    while True:
        previous = out
        out = assign(tasks, clients, out, config)
        rounds += 1
        for t, c in out.active.items():
            if c != previous.active[t]:
                moved_after_warmup &= c in previous.warmup.get(t, ())
        assert sum(map(len, out.warmup.values())) <= 1
        clients = one_round(clients, out)
        if not out.probing_rebalance_needed:
            break
    # 'a' keeps 3 of 8 (quota 2-3 each): 5 tasks move, one per round, plus the quiet round
    assert rounds == 6
    assert moved_after_warmup
    assert sorted(counts(out).values()) == [2, 3, 3]


def test_scale_down_the_removed_instances_tasks_go_to_the_remaining_ones() -> None:
    tasks = tasks_of(1, 6)
    before = Assignment(active={t: "abc"[t.partition // 2] for t in tasks})
    clients = {n: ClientState(caught_up_on(owned(before, n))) for n in "ab"}  # 'c' left
    out = assign(tasks, clients, before, AssignorConfig())
    assert owned(out, "a") >= owned(before, "a") and owned(out, "b") >= owned(before, "b")
    assert counts(out) == {"a": 3, "b": 3}
    # nobody holds their state: they go where the balance puts them, nothing to warm up
    assert not out.warmup and not out.probing_rebalance_needed


def test_scale_down_a_task_goes_to_the_instance_with_its_standby() -> None:
    tasks = tasks_of(1, 6)
    before = Assignment(
        active={t: "abc"[t.partition // 2] for t in tasks},
        standby={TaskId(0, 4): frozenset("a"), TaskId(0, 5): frozenset("b")},
    )
    clients = {
        "a": ClientState({**caught_up_on(owned(before, "a")), TaskId(0, 4): 7}),
        "b": ClientState({**caught_up_on(owned(before, "b")), TaskId(0, 5): 900}),
    }
    out = assign(tasks, clients, before, AssignorConfig(num_standby_replicas=1))
    assert out.active[TaskId(0, 4)] == "a" and out.active[TaskId(0, 5)] == "b"
    assert not out.probing_rebalance_needed
    # each task's standby is now the other instance
    assert all(out.standby[t] == {"ab".replace(out.active[t], "")} for t in tasks)


def test_scale_down_goes_to_the_least_lagging_when_the_balance_cannot_follow() -> None:
    # both of c's tasks have their standby on a, which can take only one more
    tasks = tasks_of(1, 6)
    before = Assignment(active={t: "abc"[t.partition // 2] for t in tasks})
    clients = {
        "a": ClientState({**caught_up_on(owned(before, "a")), TaskId(0, 4): 5, TaskId(0, 5): 5}),
        "b": ClientState(caught_up_on(owned(before, "b"))),
    }
    out = assign(tasks, clients, before, AssignorConfig())
    assert out.active[TaskId(0, 4)] == "a" and out.active[TaskId(0, 5)] == "a"
    # one of a's four tasks is to go to b: b warms it up meanwhile
    assert len(owned(out, "a")) == 4
    ((task, (client,)),) = [(t, sorted(cs)) for t, cs in out.warmup.items()]
    assert client == "b" and out.active[task] == "a" and out.probing_rebalance_needed


def test_a_restarted_instance_keeps_its_tasks() -> None:
    tasks = tasks_of(2, 3)
    before = assign(tasks, {n: ClientState() for n in "ab"}, None, AssignorConfig())
    # restarted with its state directory: same name, same lags
    clients = {n: ClientState(caught_up_on(owned(before, n), 3)) for n in "ab"}
    assert assign(tasks, clients, before, AssignorConfig()) == before


def test_a_restarted_instance_that_lost_its_disk_keeps_its_tasks_when_nobody_has_them() -> None:
    tasks = tasks_of(1, 4)
    before = Assignment(active={t: "ab"[t.partition % 2] for t in tasks})
    clients = {"a": ClientState(caught_up_on(owned(before, "a"))), "b": ClientState()}
    out = assign(tasks, clients, before, AssignorConfig())
    assert out == before


def test_a_restarted_instance_that_lost_its_disk_hands_over_to_its_standby() -> None:
    tasks = tasks_of(1, 2)
    before = Assignment(
        active={TaskId(0, 0): "a", TaskId(0, 1): "b"},
        standby={TaskId(0, 0): frozenset("b"), TaskId(0, 1): frozenset("a")},
    )
    clients = {"a": ClientState(), "b": ClientState(caught_up_on(tasks))}  # a lost its disk
    out = assign(tasks, clients, before, AssignorConfig(num_standby_replicas=1))
    assert out.active == dict.fromkeys(tasks, "b")  # the caught-up standby takes over
    assert out.warmup == {TaskId(0, 0): {"a"}}  # a warms up the task it is to get back
    assert out.standby == {TaskId(0, 1): {"a"}} and out.probing_rebalance_needed


# --- Kafka's HighAvailabilityTaskAssignorTest, in our types ----------------------------------


def test_even_over_clients_when_clients_divide_tasks() -> None:
    # shouldAssignActiveStatefulTasksEvenlyOverClientsWhereNumberOfClientsIntegralDivisorOfNumberOfTasks
    tasks = tasks_of(3, 3)
    clients = {n: ClientState(caught_up_on(tasks)) for n in "abc"}
    out = assign(tasks, clients, None, AssignorConfig())
    assert counts(out) == {"a": 3, "b": 3, "c": 3} and not out.probing_rebalance_needed


def test_even_over_clients_when_clients_do_not_divide_tasks() -> None:
    # shouldAssignActiveStatefulTasksEvenlyOverClientsWhereNumberOfClientsNotIntegralDivisorOfNumberOfTasks
    tasks = tasks_of(2, 5)
    clients = {n: ClientState(caught_up_on(tasks)) for n in "abc"}
    assert sorted(counts(assign(tasks, clients, None, AssignorConfig())).values()) == [3, 3, 4]


def test_even_per_capacity_over_uneven_clients() -> None:
    # shouldAssignActiveStatefulTasksEvenlyOverUnevenlyDistributedStreamThreads
    tasks = tasks_of(3, 4)
    clients = {
        n: ClientState(caught_up_on(tasks), cap) for n, cap in zip("abc", (1, 2, 3), strict=True)
    }
    assert counts(assign(tasks, clients, None, AssignorConfig())) == {"a": 2, "b": 4, "c": 6}


def test_more_clients_than_tasks() -> None:
    # shouldAssignActiveStatefulTasksEvenlyOverClientsWithMoreClientsThanTasks
    tasks = tasks_of(1, 2)
    clients = {n: ClientState(caught_up_on(tasks)) for n in "abc"}
    assert sorted(counts(assign(tasks, clients, None, AssignorConfig())).values()) == [1, 1]


def test_warmups_when_balanced_over_capacity_but_not_over_clients() -> None:
    # shouldAssignWarmUpTasksIfStatefulActiveTasksBalancedOverStreamThreadsButNotOverClients
    tasks = tasks_of(2, 2)
    clients = {
        "a": ClientState(caught_up_on(tasks), 5),
        "b": ClientState({}, 5),
        "c": ClientState({}, 5),
    }
    config = AssignorConfig(acceptable_recovery_lag=0, max_warmup_replicas=2)
    out = assign(tasks, clients, None, config)
    assert out.probing_rebalance_needed
    assert owned(out, "a") == set(tasks)
    assert len(warming(out, "b")) == 1 and len(warming(out, "c")) == 1


def test_warmed_up_clients_take_their_tasks() -> None:
    # shouldEvenlyAssignActiveStatefulTasksIfClientsAreWarmedUpToBalanceTaskOverClients
    tasks = tasks_of(2, 2)
    clients = {
        "a": ClientState(caught_up_on(tasks), 5),
        "b": ClientState({TaskId(0, 1): 0}, 5),
        "c": ClientState({TaskId(1, 0): 0}, 5),
    }
    out = assign(tasks, clients, None, AssignorConfig(acceptable_recovery_lag=0))
    assert not out.probing_rebalance_needed and not out.warmup
    assert owned(out, "b") == {TaskId(0, 1)} and owned(out, "c") == {TaskId(1, 0)}


def test_active_on_a_client_that_is_not_caught_up_when_none_is() -> None:
    # shouldAssignActiveTasksToNotCaughtUpClientIfNoneExist
    tasks = tasks_of(1, 3)
    clients = {n: ClientState(caught_up_on(tasks, 10**9)) for n in "ab"}
    out = assign(tasks, clients, None, AssignorConfig())
    assert set(out.active) == set(tasks)
    assert not out.warmup and not out.probing_rebalance_needed


def test_active_moves_to_the_caught_up_client() -> None:
    # shouldComputeNewAssignmentIfActiveTasksWasNotOnCaughtUpClient
    task = TaskId(0, 0)
    before = Assignment(active={task: "a"})
    clients = {"a": ClientState({task: 20_000}), "b": ClientState({task: 0})}
    out = assign([task], clients, before, AssignorConfig())
    assert out.active == {task: "b"} and not out.probing_rebalance_needed


def test_active_moves_to_the_most_caught_up_client_when_none_is_caught_up() -> None:
    # shouldAssignToMostCaughtUpIfActiveTasksWasNotOnCaughtUpClient
    task = TaskId(0, 0)
    before = Assignment(active={task: "a"})
    clients = {
        "a": ClientState(),  # lost its state
        "b": ClientState({task: 50_000}),
        "c": ClientState({task: 90_000}),
    }
    out = assign([task], clients, before, AssignorConfig())
    assert out.active == {task: "b"} and not out.probing_rebalance_needed


def test_no_more_than_max_warmup_replicas() -> None:
    # shouldNotAssignMoreThanMaxWarmupReplicas
    tasks = tasks_of(2, 2)
    clients = {"a": ClientState(caught_up_on(tasks)), "b": ClientState()}
    out = assign(tasks, clients, None, AssignorConfig(max_warmup_replicas=1))
    assert len(warming(out, "b")) == 1 and owned(out, "a") == set(tasks)
    assert out.probing_rebalance_needed


def test_no_more_than_max_warmup_replicas_with_standbys() -> None:
    # shouldNotAssignMoreThanMaxWarmupReplicasWithStandbys
    tasks = tasks_of(2, 2)
    clients = {n: ClientState(caught_up_on(tasks) if n == "a" else {}) for n in "abc"}
    out = assign(
        tasks, clients, None, AssignorConfig(max_warmup_replicas=1, num_standby_replicas=1)
    )
    assert sum(map(len, out.warmup.values())) == 1
    assert all(len(out.standby[t]) == 1 for t in tasks)


def test_no_warmup_and_standby_on_the_same_client() -> None:
    # shouldNotAssignWarmupAndStandbyToTheSameClient
    tasks = tasks_of(2, 2)
    clients = {"a": ClientState(caught_up_on(tasks)), "b": ClientState()}
    out = assign(tasks, clients, None, AssignorConfig(num_standby_replicas=1))
    assert warming(out, "b") and not (warming(out, "b") & standing_by(out, "b"))
    assert standing_by(out, "b") == set(tasks) - warming(out, "b")


def test_no_standbys_without_another_client() -> None:
    # shouldNotAssignAnyStandbysWithInsufficientCapacity
    tasks = tasks_of(1, 2)
    out = assign(tasks, {"a": ClientState()}, None, AssignorConfig(num_standby_replicas=1))
    assert not out.standby and owned(out, "a") == set(tasks)


def test_sticky_for_active_and_standby_while_warming_up() -> None:
    # shouldBeStickyForActiveAndStandbyTasksWhileWarmingUp: same counts as Kafka's (9, 9, 2)
    tasks = tasks_of(3, 3)
    before = Assignment(
        active=dict.fromkeys(tasks, "a"), standby=dict.fromkeys(tasks, frozenset("b"))
    )
    clients = {
        "a": ClientState(caught_up_on(tasks, 0)),
        "b": ClientState(caught_up_on(tasks, 10)),
        "c": ClientState(),
    }
    config = AssignorConfig(
        acceptable_recovery_lag=11, max_warmup_replicas=2, num_standby_replicas=1
    )
    out = assign(tasks, clients, before, config)
    assert len(owned(out, "a") | standing_by(out, "a")) == 9
    assert len(owned(out, "b") | standing_by(out, "b")) == 9
    assert len(warming(out, "c")) == 2 and not owned(out, "c") and not standing_by(out, "c")
    assert out.probing_rebalance_needed


def test_no_probing_when_the_previous_assignment_is_reused() -> None:
    # shouldReturnFalseIfPreviousAssignmentIsReused
    tasks = tasks_of(2, 2)
    before = Assignment(active={t: "ab"[t.partition] for t in tasks})
    clients = {n: ClientState(caught_up_on(owned(before, n))) for n in "ab"}
    out = assign(tasks, clients, before, AssignorConfig())
    assert out == before


def test_probing_when_warmups_are_assigned() -> None:
    # shouldReturnTrueIfWarmupTasksAreAssigned
    tasks = tasks_of(1, 2)
    clients = {"a": ClientState(caught_up_on(tasks)), "b": ClientState()}
    out = assign(tasks, clients, None, AssignorConfig())
    assert out.probing_rebalance_needed and len(warming(out, "b")) == 1


def test_no_warmups_when_every_client_is_within_an_unbounded_lag() -> None:
    # shouldSkipWarmupsWhenAcceptableLagIsMax (here: every client holds some state)
    tasks = tasks_of(3, 3)
    clients = {
        "a": ClientState(caught_up_on(tasks, 0)),
        "b": ClientState(caught_up_on(tasks, 10**12)),
        "c": ClientState(caught_up_on(tasks, 10**15)),
    }
    config = AssignorConfig(acceptable_recovery_lag=2**63 - 1)
    out = assign(tasks, clients, None, config)
    assert counts(out) == {"a": 3, "b": 3, "c": 3} and not out.warmup


# --- inputs the assignor takes as they come -------------------------------------------------


def test_previous_naming_departed_clients_and_unknown_tasks() -> None:
    tasks = tasks_of(1, 3)
    before = Assignment(
        active={TaskId(0, 0): "gone", TaskId(0, 1): "a", TaskId(7, 7): "a"},
        standby={TaskId(0, 1): frozenset({"gone"})},
        warmup={TaskId(0, 0): frozenset({"gone"})},
    )
    clients = {"a": ClientState(caught_up_on([TaskId(0, 1)])), "b": ClientState()}
    out = assign(tasks, clients, before, AssignorConfig(num_standby_replicas=1))
    assert set(out.active) == set(tasks) and out.active[TaskId(0, 1)] == "a"
    assert "gone" not in {c for cs in out.standby.values() for c in cs}


def test_no_tasks() -> None:
    out = assign([], {"a": ClientState()}, None, AssignorConfig())
    assert out == Assignment(active={})


def test_assignment_normalizes_empty_roles() -> None:
    task = TaskId(0, 0)
    built = Assignment(active={task: "a"}, standby={task: frozenset()}, warmup={task: set()})
    assert built == Assignment(active={task: "a"})
    assert built.standby == {} and built.warmup == {}


# --- config and errors ----------------------------------------------------------------------


def test_config_defaults_and_kafka_keys() -> None:
    assert AssignorConfig.from_config({}) == AssignorConfig(10000, 2, 0)
    parsed = AssignorConfig.from_config(
        {
            "acceptable.recovery.lag": "500",
            "max.warmup.replicas": 4,
            "num.standby.replicas": 1,
            "application.id": "ignored",
        }
    )
    assert parsed == AssignorConfig(500, 4, 1)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("acceptable.recovery.lag", -1),
        ("acceptable.recovery.lag", "lots"),
        ("max.warmup.replicas", 0),
        ("max.warmup.replicas", True),
        ("num.standby.replicas", -2),
        ("num.standby.replicas", 1.5),
    ],
)
def test_config_rejects_bad_values_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        AssignorConfig.from_config({key: value})


def test_config_rejects_bad_values_when_built_directly() -> None:
    with pytest.raises(ValueError, match=r"max\.warmup\.replicas"):
        AssignorConfig(max_warmup_replicas=0)


def test_no_clients_is_an_error() -> None:
    with pytest.raises(ValueError, match="no clients"):
        assign(tasks_of(1, 1), {}, None, AssignorConfig())


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5])
def test_bad_capacity_names_the_client(capacity: object) -> None:
    with pytest.raises(ValueError, match=r"client 'b': capacity"):
        assign(
            tasks_of(1, 1),
            {"a": ClientState(), "b": ClientState({}, capacity)},
            None,
            AssignorConfig(),
        )


def test_negative_lag_names_client_and_task() -> None:
    clients = {"a": ClientState({TaskId(0, 1): -5})}
    with pytest.raises(ValueError, match=r"client 'a', task 0_1: lag"):
        assign(tasks_of(1, 2), clients, None, AssignorConfig())


def test_a_lag_keyed_by_no_task_id() -> None:
    clients = {"a": ClientState({"0_1": 0})}
    with pytest.raises(ValueError, match="client 'a': lag for '0_1', which is not a TaskId"):
        assign(tasks_of(1, 2), clients, None, AssignorConfig())


def test_config_built_from_strings_holds_ints() -> None:
    assert AssignorConfig("7", "3", "1") == AssignorConfig(7, 3, 1)


def test_a_task_that_is_no_task_id() -> None:
    with pytest.raises(ValueError, match="'0_1' is not a TaskId"):
        assign(["0_1"], {"a": ClientState()}, None, AssignorConfig())


CROSS_PROCESS = """
import json
from lakestate.assign import AssignorConfig, ClientState, assign
from lakestate.task_id import TaskId
tasks = [TaskId(s, p) for s in range(3) for p in range(5)]
clients = {
    n: ClientState({t: (i * 7 + t.partition) % 4 or None for t in tasks}, 1 + i % 2)
    for i, n in enumerate(["west", "east", "north", "south"])
}
out = assign(tasks, clients, None, AssignorConfig(acceptable_recovery_lag=2, num_standby_replicas=1))
print(json.dumps({str(t): [out.active[t], sorted(out.standby.get(t, ())),
                           sorted(out.warmup.get(t, ()))] for t in tasks}, sort_keys=True))
"""


def test_the_same_in_every_process() -> None:
    """Rebalances run in different processes: string hashing (PYTHONHASHSEED) must not matter."""
    outputs = {
        subprocess.run(
            [sys.executable, "-c", CROSS_PROCESS],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1 and outputs.pop().startswith("{")
