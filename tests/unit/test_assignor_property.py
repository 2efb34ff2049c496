"""Properties of the KIP-441 assignor on random clusters.

Random tasks (1-4 sub-topologies x 1-8 partitions), 1-6 clients of capacity 1-3, random lags
(None: no state), random previous assignments (naming departed clients and unknown tasks too)
and configs. Checked: the invariants of every assignment, determinism, stability on its own
output, the exact optimum of the balanced target (brute force on small clusters), and
convergence to a balanced assignment when warmups catch up.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.assign import Assignment, AssignorConfig, ClientState, assign
from lakestate.assign.balance import balanced_target, is_balanced, quotas
from lakestate.task_id import TaskId

NAMES = ["a", "b", "c", "d", "e", "f"]
DEPARTED = ["gone", "left"]
LAGS = st.none() | st.integers(0, 250)  # acceptable.recovery.lag is 0 or 100 below


@st.composite
def clusters(draw, max_sub: int = 4, max_part: int = 8, max_clients: int = 6):
    subs = draw(st.integers(1, max_sub))
    parts = draw(st.integers(1, max_part))
    tasks = [TaskId(s, p) for s in range(subs) for p in range(parts)]
    names = draw(st.lists(st.sampled_from(NAMES[:max_clients]), min_size=1, unique=True))
    clients = {
        n: ClientState(
            lags={t: lag for t in tasks if (lag := draw(LAGS)) is not None or draw(st.booleans())},
            capacity=draw(st.integers(1, 3)),
        )
        for n in names
    }
    config = AssignorConfig(
        acceptable_recovery_lag=draw(st.sampled_from([0, 100])),
        max_warmup_replicas=draw(st.integers(1, 3)),
        num_standby_replicas=draw(st.integers(0, 2)),
    )
    previous = draw(st.none() | previous_assignments(tasks, names))
    return tasks, clients, previous, config


@st.composite
def scaled_clusters(draw):
    """A cluster as it is after instances join or leave: every task was active on an old
    instance (lag 0 there, some standbys too), new instances hold no state, and some old
    instances may have left."""
    subs, parts = draw(st.integers(1, 4)), draw(st.integers(1, 8))
    tasks = [TaskId(s, p) for s in range(subs) for p in range(parts)]
    old = draw(st.lists(st.sampled_from(NAMES + DEPARTED), min_size=1, max_size=4, unique=True))
    active = {t: draw(st.sampled_from(old)) for t in tasks}
    standby = {
        t: frozenset(draw(st.lists(st.sampled_from(old), max_size=1))) - {active[t]} for t in tasks
    }
    names = [n for n in old if n in NAMES]
    names += draw(
        st.lists(st.sampled_from([n for n in NAMES if n not in old]), min_size=1, unique=True)
    )
    lags = {n: {} for n in names}
    for t in tasks:
        for n in {active[t], *standby[t]} & set(names):
            lags[n][t] = draw(st.integers(0, 20))
    clients = {n: ClientState(lags[n], draw(st.integers(1, 3))) for n in names}
    config = AssignorConfig(
        acceptable_recovery_lag=10,
        max_warmup_replicas=draw(st.integers(1, 3)),
        num_standby_replicas=draw(st.integers(0, 2)),
    )
    return tasks, clients, Assignment(active=active, standby=standby), config


ANY_CLUSTER = clusters() | scaled_clusters()


@st.composite
def previous_assignments(draw, tasks: list[TaskId], names: list[str]):
    somewhere = st.sampled_from(names + DEPARTED)
    known = tasks + [TaskId(9, 0)]  # a task that no longer exists
    active = {t: draw(somewhere) for t in known if draw(st.integers(0, 4))}
    warmup = {t: frozenset(draw(st.lists(somewhere, max_size=2))) for t in active}
    standby = {t: frozenset(draw(st.lists(somewhere, max_size=2))) for t in active}
    return Assignment(active=active, standby=standby, warmup=warmup)


def caught_up(clients, config, task, client) -> bool:
    lag = clients[client].lags.get(task)
    return lag is not None and lag <= config.acceptable_recovery_lag


def counts(assignment: Assignment, clients) -> list[int]:
    names = sorted(clients)
    return [sum(1 for c in assignment.active.values() if c == n) for n in names]


def capacities(clients) -> list[int]:
    return [clients[n].capacity for n in sorted(clients)]


def check_invariants(tasks, clients, previous, config, out: Assignment) -> None:
    assert set(out.active) == set(tasks)
    assert set(out.active.values()) <= set(clients)
    for t in tasks:
        a = out.active[t]
        standby, warm = out.standby.get(t, frozenset()), out.warmup.get(t, frozenset())
        # no client holds two roles for one task
        assert a not in standby and a not in warm and not (standby & warm)
        assert standby <= set(clients) and warm <= set(clients)
        # the active is caught up whenever some client is
        if any(caught_up(clients, config, t, c) for c in clients):
            assert caught_up(clients, config, t, a), (t, a)
        else:
            # else the least-lagging client (None lags the most)
            inf = float("inf")
            least = min(inf if (x := s.lags.get(t)) is None else x for s in clients.values())
            lag = clients[a].lags.get(t)
            assert (inf if lag is None else lag) == least
        # standbys: as many as configured, as clients other than active and warmup allow
        assert len(standby) == min(config.num_standby_replicas, len(clients) - 1 - len(warm))
        assert len(warm) <= 1
    assert set(out.standby) | set(out.warmup) <= set(tasks)
    assert sum(len(w) for w in out.warmup.values()) <= config.max_warmup_replicas
    # probing iff warmups: a task not on its balanced target always has a warmup under way
    assert out.probing_rebalance_needed == bool(out.warmup)
    if not out.probing_rebalance_needed:
        assert is_balanced(counts(out, clients), capacities(clients))


@settings(max_examples=300, deadline=None)
@given(ANY_CLUSTER)
def test_invariants(cluster) -> None:
    tasks, clients, previous, config = cluster
    check_invariants(tasks, clients, previous, config, assign(tasks, clients, previous, config))


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_deterministic_whatever_the_input_order(cluster) -> None:
    tasks, clients, previous, config = cluster
    first = assign(tasks, clients, previous, config)
    assert assign(tasks, clients, previous, config) == first
    reordered = {n: clients[n] for n in reversed(list(clients))}
    assert assign(list(reversed(tasks)) + tasks[:1], reordered, previous, config) == first


@settings(max_examples=300, deadline=None)
@given(ANY_CLUSTER)
def test_stable_on_its_own_output(cluster) -> None:
    """A rebalance with unchanged lags changes nothing: no task moves, no warmup is dropped
    or added (a warmup under way keeps going until its lag changes)."""
    tasks, clients, previous, config = cluster
    out = assign(tasks, clients, previous, config)
    assert assign(tasks, clients, out, config) == out


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data())
def test_sticky_when_balanced_and_caught_up(cluster, data) -> None:
    """Previous actives that are balanced and caught up are kept, with no warmup."""
    tasks, clients, _, config = cluster
    names = sorted(clients)
    # a balanced previous assignment: deal the tasks out by quota, in a random order
    bounds = dict(zip(names, quotas(len(tasks), capacities(clients)), strict=True))
    slots = [n for n in names for _ in range(bounds[n][0])]
    extras = [n for n in data.draw(st.permutations(names)) if bounds[n][1] > bounds[n][0]]
    slots += extras[: len(tasks) - len(slots)]
    dealt = dict(zip(data.draw(st.permutations(tasks)), slots, strict=True))
    assert is_balanced([slots.count(n) for n in names], capacities(clients))
    # every previous owner is caught up for its tasks (others' lags stay random)
    lags = {n: dict(clients[n].lags) for n in names}
    for t, n in dealt.items():
        lags[n][t] = data.draw(st.integers(0, config.acceptable_recovery_lag))
    clients = {n: ClientState(lags[n], clients[n].capacity) for n in names}
    out = assign(tasks, clients, Assignment(active=dealt), config)
    assert out.active == dealt
    assert not out.warmup and not out.probing_rebalance_needed


@settings(max_examples=300, deadline=None)
@given(clusters(max_sub=2, max_part=3, max_clients=3))
def test_target_is_the_exact_optimum(cluster) -> None:
    """Brute force: among balanced assignments, the target places the most tasks on caught-up
    clients, then on clients it is sticky to, then on clients with state."""
    tasks, clients, previous, config = cluster
    names = sorted(clients)
    # any stickiness will do for the optimizer: here the previous active and warmups
    previous = previous or Assignment(active={})

    def sticky(t, c):
        return previous.active.get(t) == c or c in previous.warmup.get(t, ())

    def is_caught_up(t, c):
        return caught_up(clients, config, t, c)

    def has_state(t, c):
        return clients[c].lags.get(t) is not None

    target = balanced_target(tasks, names, capacities(clients), is_caught_up, has_state, sticky)

    def score(placement):
        return (
            sum(is_caught_up(t, c) for t, c in placement.items()),
            sum(sticky(t, c) for t, c in placement.items()),
            sum(has_state(t, c) for t, c in placement.items()),
        )

    best = []
    for choice in itertools.product(names, repeat=len(tasks)):
        if not is_balanced([choice.count(n) for n in names], capacities(clients)):
            continue
        placement = dict(zip(tasks, choice, strict=True))
        best.append((score(placement), placement))
    top = max(s for s, _ in best)
    assert score(target) == top
    assert is_balanced([list(target.values()).count(n) for n in names], capacities(clients))


def next_lags(clients, out: Assignment, every_replica: bool = True):
    """One round: its warmups end it caught up (lag 0), and with ``every_replica`` its actives
    and standbys too (they process or restore); other lags stay as they were."""
    holders = {n: set() for n in clients}
    if every_replica:
        for t, a in out.active.items():
            holders[a].add(t)
    for roles in (out.warmup, out.standby) if every_replica else (out.warmup,):
        for t, cs in roles.items():
            for c in cs:
                holders[c].add(t)
    return {
        n: ClientState({**s.lags, **dict.fromkeys(holders[n], 0)}, s.capacity)
        for n, s in clients.items()
    }


@pytest.mark.parametrize("every_replica", [True, False], ids=["every-replica", "warmups-only"])
@settings(max_examples=300, deadline=None)
@given(cluster=ANY_CLUSTER)
def test_converges_to_balance_then_stays(every_replica: bool, cluster) -> None:
    """Rounds in which every warmup catches up reach a balanced assignment, with no probing
    rebalance needed, within 1 + ceil(tasks / max.warmup.replicas) rounds; then it stays put.

    Why the bound (N tasks, m = max.warmup.replicas): the target maximizes the tasks placed
    on caught-up clients (F). A round with more than m pending tasks warms up m targets, all
    caught up in the next round, where the old target is still balanced: F grows by >= m, so
    there are at most ceil(N / m) - 1 such rounds. A round with 1..m pending warms them all:
    in the next round the old target puts every task that has a caught-up client on one and
    every task on a sticky client (its holder or its warmup), so the new target is as good,
    hence fully sticky, and nothing is pending. Then assign returns its own output.
    Warmups-only is the issue's simulation (actives and standbys keep their lags).
    """
    tasks, clients, previous, config = cluster
    bound = 1 + math.ceil(len(tasks) / config.max_warmup_replicas)
    out = previous
    for _ in range(bound):
        out = assign(tasks, clients, out, config)
        check_invariants(tasks, clients, None, config, out)
        clients = next_lags(clients, out, every_replica)
        if not out.probing_rebalance_needed:
            break
    assert not out.probing_rebalance_needed
    assert is_balanced(counts(out, clients), capacities(clients))
    again = assign(tasks, clients, out, config)
    assert again == out
