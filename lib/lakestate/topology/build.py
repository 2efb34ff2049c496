"""Validation and splitting of the graph into sub-topologies."""

from __future__ import annotations

from lakestate.errors import TopologyException
from lakestate.topology.copartition import CopartitionGroup
from lakestate.topology.graph import (
    SINK,
    SOURCE,
    GlobalTableSpec,
    Node,
    StoreSpec,
    SubTopology,
    Topology,
)


def build_topology(
    nodes: dict[str, Node],
    stores: dict[str, StoreSpec],
    store_owners: dict[str, list[str]],
    global_tables: list[GlobalTableSpec],
    copartition: list[tuple[str, list[str], list[str]]] | None = None,
) -> Topology:
    """Check the graph and cut it at repartition topics into sub-topologies.
    ``copartition``: per join, (join node, source nodes of one side, of the other)."""
    _validate(nodes, stores, store_owners, global_tables)
    subtopologies = [
        _subtopology(index, members, nodes, stores)
        for index, members in enumerate(_task_groups(nodes, stores, global_tables))
    ]
    groups = _copartition_groups(nodes, subtopologies, copartition or [])
    return Topology(nodes, stores, subtopologies, list(global_tables), groups)


def _task_groups(
    nodes: dict[str, Node], stores: dict[str, StoreSpec], global_tables: list[GlobalTableSpec]
) -> list[list[str]]:
    """The nodes of each sub-topology, in creation order: nodes joined by an edge or by a
    store they share are in one; a global table's source node is in none."""
    order = {name: i for i, name in enumerate(nodes)}
    global_nodes = {g.source_node for g in global_tables}
    parent = {name: name for name in nodes if name not in global_nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            # Keep the earliest node as the root so ids follow creation order.
            if order[ra] > order[rb]:
                ra, rb = rb, ra
            parent[rb] = ra

    for name in parent:
        for child in nodes[name].children:
            union(name, child)
    # Nodes that share a store must run in the same task.
    users: dict[str, list[str]] = {}
    for name in parent:
        for store in nodes[name].stores:
            if not stores[store].is_global:
                users.setdefault(store, []).append(name)
    for names in users.values():
        for name in names[1:]:
            union(names[0], name)

    groups: dict[str, list[str]] = {}
    for name in parent:
        groups.setdefault(find(name), []).append(name)
    return [
        sorted(groups[root], key=order.__getitem__)
        for root in sorted(groups, key=order.__getitem__)
    ]


def _subtopology(
    index: int, members: list[str], nodes: dict[str, Node], stores: dict[str, StoreSpec]
) -> SubTopology:
    """Sub-topology ``index`` of the nodes ``members``: its topics by role and its stores."""
    sources = [nodes[n] for n in members if nodes[n].kind == SOURCE]
    sinks = [nodes[n] for n in members if nodes[n].kind == SINK]
    return SubTopology(
        id=index,
        nodes=tuple(members),
        source_topics=tuple(t for s in sources if not s.internal_topic for t in s.topics),
        repartition_sources=tuple(t for s in sources if s.internal_topic for t in s.topics),
        sink_topics=tuple(s.topics[0] for s in sinks if not s.internal_topic),
        repartition_sinks=tuple(s.topics[0] for s in sinks if s.internal_topic),
        stores=tuple(
            sorted({st for n in members for st in nodes[n].stores if not stores[st].is_global})
        ),
    )


def _copartition_groups(
    nodes: dict[str, Node],
    subtopologies: list[SubTopology],
    joins: list[tuple[str, list[str], list[str]]],
) -> list[CopartitionGroup]:
    """Each join's sides as topics; both must run in the join's sub-topology (one task
    reads partition p of both), which sharing the table's store gives."""
    sub_of = {name: sub.id for sub in subtopologies for name in sub.nodes}
    groups = []
    for join, left, right in joins:
        for side in (left, right):
            for source in side:
                if sub_of.get(source) != sub_of.get(join):
                    raise TopologyException(
                        f"invalid topology: join {join} reads source {source} from another "
                        "sub-topology; both sides of a join must be co-partitioned"
                    )
        internal = frozenset(
            t for s in left + right if nodes[s].internal_topic for t in nodes[s].topics
        )
        groups.append(
            CopartitionGroup(
                join,
                tuple(t for s in left for t in nodes[s].topics),
                tuple(t for s in right for t in nodes[s].topics),
                internal,
            )
        )
    return groups


def _validate(
    nodes: dict[str, Node],
    stores: dict[str, StoreSpec],
    store_owners: dict[str, list[str]],
    global_tables: list[GlobalTableSpec],
) -> None:
    if not any(n.kind == SOURCE for n in nodes.values()):
        raise TopologyException(
            "invalid topology: it has no source node; add one with stream(), table() or "
            "global_table() before build()"
        )
    readers: dict[str, str] = {}
    for node in nodes.values():
        if node.kind != SOURCE:
            continue
        for topic in node.topics:
            if topic in readers:
                raise TopologyException(
                    f"invalid topology: node {node.name} reads topic {topic!r}, which is "
                    f"already read by node {readers[topic]}; a topic can have one source"
                )
            readers[topic] = node.name
    for node in nodes.values():
        for child in node.children:
            if child not in nodes:
                raise TopologyException(
                    f"invalid topology: node {node.name} has unknown child {child}"
                )
        if node.kind == SINK and node.children:
            raise TopologyException(f"invalid topology: sink node {node.name} cannot have children")
        for store in node.stores:
            if store not in stores:
                raise TopologyException(
                    f"invalid topology: node {node.name} uses store {store!r}, which was never added"
                )
    for store, owners in store_owners.items():
        if len(owners) > 1:
            raise TopologyException(
                f"invalid topology: store {store!r} is materialized by both node {owners[0]} "
                f"and node {owners[1]}; give each its own name with Materialized.as_()"
            )
