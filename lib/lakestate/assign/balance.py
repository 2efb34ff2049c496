"""The balanced target: where each task's active should be once every warmup has caught up.

Each client gets a quota of tasks within one of its capacity share (``floor`` or ``ceil`` of
``tasks * capacity / total capacity``). Among all assignments meeting the quotas, the target
is the one that places, in this order of priority, the most tasks on (1) a caught-up client,
(2) a client the task is sticky to (the assignor passes: its current holder or the client
warming it up), (3) a client holding some state for them, then (4) the closest to a
round-robin over the sorted tasks (a fresh cluster gets Kafka's spread), (5) the least sum of
a fixed 64-bit hash of each (task, client), which tells apart any two assignments still tied
(two distinct ones tie only by a 64-bit coincidence: the isolation lemma bounds its odds by
tasks x clients / 2**64). It is found exactly, as a min-cost flow (tasks -> clients -> quota
slots).

Uniqueness is what makes the assignor stable: a rebalance on its own output, with the same
lags, finds the same target again (stickiness only moved towards it).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Sequence

from lakestate.task_id import TaskId


def _tie(task: TaskId, client: str) -> int:
    """A fixed 64-bit number per (task, client), the same in every process."""
    digest = hashlib.blake2b(f"{task}|{client}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def quotas(n_tasks: int, capacities: Sequence[int]) -> list[tuple[int, int]]:
    """Per client (lowest, highest) task count: floor and ceil of its capacity share."""
    total = sum(capacities)
    return [((n_tasks * c) // total, -((-n_tasks * c) // total)) for c in capacities]


def is_balanced(counts: Sequence[int], capacities: Sequence[int]) -> bool:
    """Whether every client's task count is within one task of its capacity share."""
    bounds = quotas(sum(counts), capacities)
    return all(lo <= n <= hi for n, (lo, hi) in zip(counts, bounds, strict=True))


class _Flow:
    """The residual graph of _place's min-cost flow, the task nodes folded away."""

    def __init__(
        self, n: int, k: int, cost: Callable[[int, int], int], bounds: Sequence[tuple[int, int]]
    ) -> None:
        self.k, self.cost, self.bounds = k, cost, bounds
        # a unit over a lower bound costs more than any whole placement
        self.over = 1 + sum(max(cost(i, j) for j in range(k)) for i in range(n))
        self.at = [-1] * n  # client of each task; -1: not placed yet
        self.count = [0] * k
        self.source, self.sink = k, k + 1
        self.potential = [0] * (k + 2)
        self.unplaced = [[(cost(i, j), i) for i in range(n)] for j in range(k)]
        for heap in self.unplaced:
            heapq.heapify(heap)
        self.movable: list[list[list[tuple[int, int]]]] = [[[] for _ in range(k)] for _ in range(k)]

    def settle(self, i: int, j: int) -> None:
        """Task i now on client j: it may move from there to any other client."""
        self.at[i] = j
        here = self.cost(i, j)
        for other in range(self.k):
            if other != j:
                heapq.heappush(self.movable[j][other], (self.cost(i, other) - here, i))

    @staticmethod
    def _top(heap: list[tuple[int, int]], valid: Callable[[int], bool]) -> tuple[int, int] | None:
        while heap and not valid(heap[0][1]):
            heapq.heappop(heap)  # stale: the task was placed or moved since
        return heap[0] if heap else None

    def arcs(self, u: int) -> list[tuple[int, int, int]]:
        """The residual arcs out of node u, as (node, cost, task or -1)."""
        k, count, bounds, at = self.k, self.count, self.bounds, self.at
        steps: list[tuple[int, int, int]] = []
        if u == self.source:
            for j in range(k):
                head = self._top(self.unplaced[j], lambda i: at[i] < 0)
                if head:
                    steps.append((j, head[0], head[1]))
        elif u == self.sink:
            for j in range(k):
                if count[j]:
                    steps.append((j, -self.over if count[j] > bounds[j][0] else 0, -1))
        else:
            for j in range(k):
                if j != u:
                    head = self._top(self.movable[u][j], lambda i, u=u: at[i] == u)
                    if head:
                        steps.append((j, head[0], head[1]))
            if count[u] < bounds[u][1]:
                steps.append((self.sink, self.over if count[u] >= bounds[u][0] else 0, -1))
        return steps

    def shortest_paths(self) -> tuple[list[int | None], list[tuple[int, int] | None]]:
        """Dijkstra from the source on reduced costs: distances and (previous node, task)."""
        k = self.k
        dist: list[int | None] = [None] * (k + 2)
        via: list[tuple[int, int] | None] = [None] * (k + 2)  # (previous node, task or -1)
        done = [False] * (k + 2)
        dist[self.source] = 0
        while True:
            u = min(
                (v for v in range(k + 2) if not done[v] and dist[v] is not None),
                default=None,
                key=lambda v: dist[v],
            )
            if u is None:
                break
            done[u] = True
            du = dist[u] + self.potential[u]
            for v, c, task in self.arcs(u):
                nd = du + c - self.potential[v]
                if not done[v] and (dist[v] is None or nd < dist[v]):
                    dist[v], via[v] = nd, (u, task)
        return dist, via

    def augment(self) -> None:
        """Send one more task along the cheapest path from the source to the sink."""
        dist, via = self.shortest_paths()
        if dist[self.sink] is None:
            raise AssertionError("the quotas leave no room for every task")
        for v in range(self.k + 2):
            if dist[v] is not None:
                self.potential[v] += dist[v]
        # walk the path back from the sink: the last client takes one more task
        node, task = via[self.sink]
        self.count[node] += 1
        while node != self.source:
            previous, task = via[node]
            self.settle(task, node)
            node = previous


def _place(
    n: int, k: int, cost: Callable[[int, int], int], bounds: Sequence[tuple[int, int]]
) -> list[int]:
    """The least-cost placement of tasks 0..n-1 on clients 0..k-1, client j taking between
    bounds[j][0] (each unit below that is free) and bounds[j][1] tasks (each unit above the
    lower bound costs more than any placement could save).

    Min-cost flow source -> task -> client -> sink by successive shortest paths, with the
    task nodes folded away: a path from the source reaches a client through a task not yet
    placed, or through moving a placed task from one client to another, so Dijkstra runs on
    the k clients alone (k + 2 nodes) and each client pair keeps a heap of its movable tasks,
    keyed by what moving them costs (potentials shift whole heaps alike). n paths of O(k^2).
    """
    flow = _Flow(n, k, cost, bounds)
    for _ in range(n):
        flow.augment()
    return flow.at


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
    # Cost of placing task i on client j, levels weighted so that each dominates the ones
    # below it whatever the other placements: (1) not caught up, (2) not sticky, (3) no state,
    # (4) how far the client is from the task's turn in a round-robin over the sorted tasks
    # (so a fresh cluster gets Kafka's round-robin, each sub-topology's partitions spread),
    # (5) a fixed 64-bit hash of (task, client) that tells any remaining tie apart.
    level = n + 1  # a level's sum over the tasks stays below this
    spread = n * k + 1
    tie_bits = 64 + n.bit_length()  # room for a sum of n 64-bit hashes

    def cost(i: int, j: int) -> int:
        t, c = tasks[i], clients[j]
        value = (not caught_up(t, c)) * level + (not sticky(t, c))
        value = value * level + (not has_state(t, c))
        value = value * spread + (j - i) % k
        return (value << tie_bits) + _tie(t, c)

    weights = [[cost(i, j) for j in range(k)] for i in range(n)]
    placed = _place(n, k, lambda i, j: weights[i][j], quotas(n, capacities))
    target = {tasks[i]: clients[j] for i, j in enumerate(placed)}
    return target
