"""The balanced target: where each task's active should be once every warmup has caught up.

Each client gets a quota of tasks within one of its capacity share (``floor`` or ``ceil`` of
``tasks * capacity / total capacity``). Among all assignments meeting the quotas, the target
is the one that places, in this order of priority, the most tasks on (1) a caught-up client,
(2) a client the task is sticky to (the assignor passes: its current holder or the client
warming it up), (3) a client holding some state for them; remaining ties go by a fixed order
(a round-robin over the sorted tasks, then lexicographic). That optimum is unique and is
found exactly as a min-cost flow (tasks -> clients -> quota slots).

Uniqueness is what makes the assignor stable: a rebalance on its own output, with the same
lags, finds the same target again (stickiness only moved towards it).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from lakestate.task_id import TaskId


def quotas(n_tasks: int, capacities: Sequence[int]) -> list[tuple[int, int]]:
    """Per client (lowest, highest) task count: floor and ceil of its capacity share."""
    total = sum(capacities)
    return [((n_tasks * c) // total, -((-n_tasks * c) // total)) for c in capacities]


def is_balanced(counts: Sequence[int], capacities: Sequence[int]) -> bool:
    """Whether every client's task count is within one task of its capacity share."""
    bounds = quotas(sum(counts), capacities)
    return all(lo <= n <= hi for n, (lo, hi) in zip(counts, bounds, strict=True))


class _Flow:
    """Min-cost flow by successive shortest paths (Dijkstra with potentials, costs >= 0)."""

    def __init__(self, n_nodes: int) -> None:
        self.graph: list[list[int]] = [[] for _ in range(n_nodes)]
        self.to: list[int] = []
        self.cap: list[int] = []
        self.cost: list[int] = []

    def add(self, u: int, v: int, cap: int, cost: int) -> int:
        """An edge u -> v; returns its index (its residual twin is index + 1)."""
        for a, b, c, w in ((u, v, cap, cost), (v, u, 0, -cost)):
            self.graph[a].append(len(self.to))
            self.to.append(b)
            self.cap.append(c)
            self.cost.append(w)
        return len(self.to) - 2

    def run(self, source: int, sink: int, amount: int) -> None:
        """Push ``amount`` units from source to sink at least cost (one unit per path)."""
        n = len(self.graph)
        potential = [0] * n
        for _ in range(amount):
            dist: list[int | None] = [None] * n
            via = [-1] * n
            dist[source] = 0
            heap = [(0, source)]
            while heap:
                d, u = heapq.heappop(heap)
                if d != dist[u]:
                    continue
                for e in self.graph[u]:
                    if self.cap[e] <= 0:
                        continue
                    v = self.to[e]
                    nd = d + self.cost[e] + potential[u] - potential[v]
                    if dist[v] is None or nd < dist[v]:
                        dist[v] = nd
                        via[v] = e
                        heapq.heappush(heap, (nd, v))
            if dist[sink] is None:
                raise AssertionError("quotas leave no room for every task")
            for v in range(n):
                if dist[v] is not None:
                    potential[v] += dist[v]
            v = sink
            while v != source:
                e = via[v]
                self.cap[e] -= 1
                self.cap[e ^ 1] += 1
                v = self.to[e ^ 1]


def balanced_target(
    tasks: Sequence[TaskId],
    clients: Sequence[str],
    capacities: Sequence[int],
    caught_up: Callable[[TaskId, str], bool],
    has_state: Callable[[TaskId, str], bool],
    sticky: Callable[[TaskId, str], bool],
) -> dict[TaskId, str]:
    """The target client of every task (see the module's docstring for what it optimizes).

    ``tasks`` and ``clients`` must be sorted; ``sticky(task, client)``: the task is sticky to
    the client (placing it there counts at the second level).
    """
    n, k = len(tasks), len(clients)
    if n == 0:
        return {}
    # Cost of placing task i on client j: levels weighted so that each dominates the ones
    # below it whatever the other placements; the last level gives every edge its own power
    # of two, so no two different placements cost the same (a unique optimum).
    tie_bits = n * k
    level = n + 1

    def cost(i: int, j: int) -> int:
        t, c = tasks[i], clients[j]
        rank = (j - i) % k  # 0: the task's client in a round-robin over sorted tasks
        value = (not caught_up(t, c)) * level * level
        value += (not sticky(t, c)) * level
        value += not has_state(t, c)
        return (value << tie_bits) + (1 << (rank * n + i))

    over_quota = (level**3 + 1) << tie_bits  # above any sum of placement costs
    source, sink = 0, n + k + 1
    flow = _Flow(n + k + 2)
    placements: dict[int, list[tuple[int, int]]] = {}
    for i in range(n):
        flow.add(source, 1 + i, 1, 0)
        placements[i] = [(flow.add(1 + i, 1 + n + j, 1, cost(i, j)), j) for j in range(k)]
    for j, (lo, hi) in enumerate(quotas(n, capacities)):
        if lo:
            flow.add(1 + n + j, sink, lo, 0)
        if hi > lo:
            flow.add(1 + n + j, sink, hi - lo, over_quota)
    flow.run(source, sink, n)
    target = {}
    for i, edges in placements.items():
        (j,) = [j for e, j in edges if flow.cap[e] == 0]
        target[tasks[i]] = clients[j]
    return target
