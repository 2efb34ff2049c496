"""Stream-stream joins of the DSL: ``JoinWindows``, ``StreamJoined`` and the wiring of
``KStream.join/left_join/outer_join(other_stream, joiner, windows)``; the processors are
in processors/stream_join.py.

The wiring is Kafka's (KStreamImplJoin): each side passes a ``KSTREAM-WINDOWED-`` node that
keeps its records in the side's buffer store, then its join node (``KSTREAM-JOINTHIS-`` /
``-JOINOTHER-``; ``OUTERTHIS``/``OUTEROTHER`` on a side whose records are emitted without
a partner), which reads the other side's buffer; both feed one ``KSTREAM-MERGE-`` node. A
left or outer join adds the shared store of records waiting for a partner
(``KSTREAM-OUTERSHARED-<n>-store``). The stores put both sides in one sub-topology, so
they must be co-partitioned (checked when a run starts); a side whose key changed is
repartitioned first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import GraphBuilder
from lakestate.dsl.names import check_store_name
from lakestate.dsl.repartitioned import ClassOrInstance, optional_serde
from lakestate.errors import TopologyException
from lakestate.processors.stateless import PassThrough
from lakestate.processors.stream_join import JoinBuffer, StreamStreamJoin
from lakestate.serdes import JSON, Serde, TopicSerdes
from lakestate.state.stream_join import (
    JoinBufferStore,
    LeftOrRightValueSerde,
    WaitingRecordsStore,
)
from lakestate.topology.graph import SOURCE, StoreSpec

if TYPE_CHECKING:
    from lakestate.dsl.kstream import KStream

Joiner = Callable[[Any, Any], Any]


def _ms(value: Any, what: str) -> int:
    if not isinstance(value, timedelta):
        raise TopologyException(f"{what} must be a timedelta, got {value!r}")
    return int(value / timedelta(milliseconds=1))


@dataclass(frozen=True)
class JoinWindows:
    """Which records of two streams join: a record at ``ts`` joins the other side's records
    of its key with timestamps in ``[ts - before, ts + after]`` (the other side's records
    look the other way). ``grace`` is how long after that window ends out-of-order records
    are still taken; left and outer joins emit a record without a partner once it ends."""

    before_ms: int
    after_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.before_ms + self.after_ms < 0:
            raise TopologyException(
                f"JoinWindows: before + after must not be negative, got before "
                f"{self.before_ms} ms and after {self.after_ms} ms"
            )
        if self.grace_ms < 0:
            raise TopologyException(
                f"JoinWindows: grace must not be negative, got {self.grace_ms} ms"
            )

    @staticmethod
    def of_time_difference_and_grace(time_difference: timedelta, grace: timedelta) -> JoinWindows:
        """Records at most ``time_difference`` apart join; late ones are taken for ``grace``."""
        diff = _ms(time_difference, "JoinWindows time difference")
        if diff < 0:
            raise TopologyException(
                f"JoinWindows: time difference must not be negative, got {diff} ms"
            )
        return JoinWindows(diff, diff, _ms(grace, "JoinWindows grace"))

    @staticmethod
    def of_time_difference_without_grace(time_difference: timedelta) -> JoinWindows:
        """``of_time_difference_and_grace(time_difference, 0)``."""
        return JoinWindows.of_time_difference_and_grace(time_difference, timedelta(0))

    # Kafka's name for the same thing.
    of_time_difference_with_no_grace = of_time_difference_without_grace

    def before(self, time_difference: timedelta) -> JoinWindows:
        """How far back a left record looks (may be negative, if after makes up for it)."""
        return JoinWindows(_ms(time_difference, "JoinWindows before"), self.after_ms, self.grace_ms)

    def after(self, time_difference: timedelta) -> JoinWindows:
        """How far ahead a left record looks (may be negative, if before makes up for it)."""
        return JoinWindows(self.before_ms, _ms(time_difference, "JoinWindows after"), self.grace_ms)

    def size(self) -> int:
        """before + after, in ms."""
        return self.before_ms + self.after_ms

    @property
    def retention_ms(self) -> int:
        """How long a side's buffer keeps a record behind its stream time."""
        return self.before_ms + self.after_ms + self.grace_ms


@dataclass(frozen=True)
class StreamJoined:
    """Names a stream-stream join: ``StreamJoined.as_(store_name)`` names its stores
    (``<name>-this-join-store``, ``<name>-other-join-store``, ``<name>-outer-shared-join-store``
    or ``-left-shared-join-store``; ``outer-`` before ``this``/``other`` on a side whose
    records are emitted without a partner), ``.with_name(name)`` its processors and
    repartition topics (``<name>-left-repartition``, ``<name>-right-repartition``).

    ``with_(key_serde, value_serde, other_value_serde)`` and ``with_key_serde`` /
    ``with_value_serde`` / ``with_other_value_serde``: the serdes (Kafka's). This side's
    buffer store takes the key and value serde, the other side's the key and other value
    serde (a record they cannot hold fails at the store, as Kafka's put); a side's
    repartition topic takes them too, else the side stream's (``Consumed``'s, carried
    forward). The waiting store of a left or outer join takes the key serde and both value
    serdes (each side's values by its own, Kafka's LeftOrRightValueSerde). The joined
    stream keeps the key serde. None: not given (Json, lakestate's default serde; Kafka's
    ``join(other, joiner, windows)`` passes ``StreamJoined.with(null, null, null)``, so
    the stores take no serde of the streams')."""

    store_name: str | None = None
    name: str | None = None
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    other_value_serde: Serde | None = None

    @staticmethod
    def as_(store_name: str) -> StreamJoined:
        return StreamJoined(check_store_name(store_name, "StreamJoined.as_"), None)

    @ClassOrInstance
    def with_(
        self,
        key_serde: Serde | None,
        value_serde: Serde | None,
        other_value_serde: Serde | None,
    ) -> StreamJoined:
        """The join's serdes (Kafka's ``StreamJoined.with``); names kept on an instance."""
        return (
            self.with_key_serde(key_serde)
            .with_value_serde(value_serde)
            .with_other_value_serde(other_value_serde)
        )

    @ClassOrInstance
    def with_store_name(self, store_name: str) -> StreamJoined:
        name = check_store_name(store_name, "StreamJoined.with_store_name")
        return replace(self, store_name=name)

    @ClassOrInstance
    def with_name(self, name: str) -> StreamJoined:
        return replace(self, name=check_store_name(name, "StreamJoined.with_name"))

    @ClassOrInstance
    def with_key_serde(self, key_serde: Serde | None) -> StreamJoined:
        """Both sides' key serde."""
        return replace(self, key_serde=optional_serde(key_serde, "StreamJoined key_serde"))

    @ClassOrInstance
    def with_value_serde(self, value_serde: Serde | None) -> StreamJoined:
        """This (the left) side's value serde."""
        serde = optional_serde(value_serde, "StreamJoined value_serde")
        return replace(self, value_serde=serde)

    @ClassOrInstance
    def with_other_value_serde(self, other_value_serde: Serde | None) -> StreamJoined:
        """The other (the right) side's value serde."""
        serde = optional_serde(other_value_serde, "StreamJoined other_value_serde")
        return replace(self, other_value_serde=serde)

    def side_serdes(self, is_left: bool) -> TopicSerdes:
        """A side's buffer store serdes (Json where not given)."""
        value = self.value_serde if is_left else self.other_value_serde
        return TopicSerdes(self.key_serde or JSON, value or JSON)

    def waiting_serdes(self) -> TopicSerdes:
        """The waiting store's serdes: the key serde, and both sides' value serdes (Json
        where not given); one serde when both sides have it (what LeftOrRightValueSerde
        of two equal serdes does, and its view can type the values)."""
        left, right = self.value_serde or JSON, self.other_value_serde or JSON
        values = left if left == right else LeftOrRightValueSerde(left, right)
        return TopicSerdes(self.key_serde or JSON, values)


def _repartitioned(
    graph: GraphBuilder,
    stream: KStream,
    topic: str,
    serdes: tuple[Serde | None, Serde | None],
    outer: bool,
) -> str:
    """The node a side's join reads: ``stream``'s own, or, after a key change, the source of
    its repartition topic ``topic`` (made once: a stream joined with itself shares it),
    with ``serdes`` (key, value), else the stream's (Kafka's repartitionForJoin). The topic
    of a left or outer join (``outer``) carries null-key records, which its join emits
    without a partner (KIP-962; Kafka 4.4 does so on both sides, checked by the
    conformance groups bytes_stream_join-*); an inner join's drops them, uncounted."""
    key, value = serdes
    if not stream._repartition_required:
        return stream.node_name
    for node in graph.nodes.values():
        if node.kind == SOURCE and node.internal_topic and node.topics == [topic]:
            return node.name
    serdes = TopicSerdes(key or stream.serdes.key, value or stream.serdes.value)
    return graph.repartition(stream.node_name, topic, serdes=serdes, keep_null_keys=outer)


def stream_stream_join(
    this: KStream,
    other: KStream,
    joiner: Joiner,
    windows: JoinWindows,
    how: str,
    stream_joined: StreamJoined | None,
) -> KStream:
    """``how``: "inner", "left" or "outer" (this is the left side)."""
    from lakestate.dsl.kstream import KStream

    graph: GraphBuilder = this._graph
    left_outer, right_outer = how in ("left", "outer"), how == "outer"
    _check_arguments(graph, other, windows, stream_joined)
    named = stream_joined or StreamJoined()
    # Kafka's repartition topics: <name>-left/-right with a name, else <the stream's node>.
    this_topic = f"{named.name}-left" if named.name else this.node_name
    other_topic = f"{named.name}-right" if named.name else other.node_name
    key = named.key_serde
    this_parent = _repartitioned(
        graph, this, f"{this_topic}-repartition", (key, named.value_serde), left_outer
    )
    other_parent = _repartitioned(
        graph, other, f"{other_topic}-repartition", (key, named.other_value_serde), left_outer
    )
    names = _names(graph, named, left_outer, right_outer)
    operator = {"inner": "join", "left": "left_join", "outer": "outer_join"}[how]
    check_function(joiner, names["this"], f"KStream.{operator}", "joiner(value, other_value)")
    this_store, other_store, waiting = _stores(graph, named, names, left_outer, right_outer)
    stores = (this_store, other_store, waiting)
    _add_buffers(graph, names, this_parent, other_parent, stores, windows, named)
    tracker = names["this"]

    def side(is_left: bool) -> Callable[[], StreamStreamJoin]:
        return lambda: StreamStreamJoin(
            is_left=is_left,
            other_store=other_store if is_left else this_store,
            waiting_store=waiting,
            joiner=joiner,
            outer=left_outer if is_left else right_outer,
            before_ms=windows.before_ms,
            after_ms=windows.after_ms,
            grace_ms=windows.grace_ms,
            tracker=tracker,
        )

    shared = [waiting] if waiting is not None else []
    graph.add_processor(names["this"], names["this_windowed"], side(True), [other_store, *shared])
    graph.add_processor(names["other"], names["other_windowed"], side(False), [this_store, *shared])
    _merge(graph, names)
    graph.copartition_groups.append(
        (names["this"], graph.source_nodes(this_parent), graph.source_nodes(other_parent))
    )
    serdes = TopicSerdes(named.key_serde or JSON, JSON)  # Kafka's: the StreamJoined key serde
    return KStream(graph, names["merge"], repartition_required=False, serdes=serdes)


def _check_arguments(graph: GraphBuilder, other: Any, windows: Any, stream_joined: Any) -> None:
    """TopologyException for an argument of the wrong kind."""
    from lakestate.dsl.kstream import KStream

    if not isinstance(other, KStream) or other._graph is not graph:
        raise TopologyException("a stream-stream join takes a KStream of the same StreamsBuilder")
    if not isinstance(windows, JoinWindows):
        raise TopologyException(f"a stream-stream join takes JoinWindows, got {windows!r}")
    if stream_joined is not None and not isinstance(stream_joined, StreamJoined):
        raise TopologyException(f"stream_joined must be a StreamJoined, got {stream_joined!r}")


def _add_buffers(
    graph: GraphBuilder,
    names: dict[str, str],
    this_parent: str,
    other_parent: str,
    stores: tuple[str, str, str | None],
    windows: JoinWindows,
    named: StreamJoined,
) -> None:
    """Each side's windowed node, which buffers its records in its store for the other
    side to join, and the stores with their StreamJoined serdes (the waiting records' on
    this side's join node)."""
    this_store, other_store, waiting = stores
    retention = windows.retention_ms
    graph.add_processor(
        names["this_windowed"],
        this_parent,
        lambda: JoinBuffer(this_store, retention),
        [this_store],
    )
    graph.add_processor(
        names["other_windowed"],
        other_parent,
        lambda: JoinBuffer(other_store, retention),
        [other_store],
    )
    for store, node, is_left in (
        (this_store, names["this_windowed"], True),
        (other_store, names["other_windowed"], False),
    ):
        serdes = named.side_serdes(is_left)
        graph.add_store(StoreSpec(store, JoinBufferStore.kind, serdes=serdes), node)
    if waiting is not None:
        spec = StoreSpec(waiting, WaitingRecordsStore.kind, serdes=named.waiting_serdes())
        graph.add_store(spec, names["this"])


def _merge(graph: GraphBuilder, names: dict[str, str]) -> None:
    """The node where both sides' results meet (Kafka's PassThrough merge)."""
    graph.add_processor(names["merge"], names["this"], PassThrough)
    graph.nodes[names["merge"]].parents.append(names["other"])
    graph.nodes[names["other"]].children.append(names["merge"])


def _names(
    graph: GraphBuilder, named: StreamJoined, left_outer: bool, right_outer: bool
) -> dict[str, str]:
    """The join's node names, in Kafka's order of generation (so numbers match Kafka's)."""
    this_suffix = "-outer-this-join" if right_outer else "-this-join"
    other_suffix = "-outer-other-join" if left_outer else "-other-join"
    generated = {
        "this_windowed": graph.new_name("KSTREAM-WINDOWED-"),
        "other_windowed": graph.new_name("KSTREAM-WINDOWED-"),
        "this": graph.new_name("KSTREAM-OUTERTHIS-" if right_outer else "KSTREAM-JOINTHIS-"),
        "other": graph.new_name("KSTREAM-OUTEROTHER-" if left_outer else "KSTREAM-JOINOTHER-"),
        "merge": graph.new_name("KSTREAM-MERGE-"),
    }
    names = dict(generated, this_generated=generated["this"], other_generated=generated["other"])
    if named.name:
        names.update(
            this_windowed=f"{named.name}-this-windowed",
            other_windowed=f"{named.name}-other-windowed",
            this=f"{named.name}{this_suffix}",
            other=f"{named.name}{other_suffix}",
            merge=f"{named.name}-merge",
        )
    names["this_suffix"], names["other_suffix"] = this_suffix, other_suffix
    taken = [
        names[k]
        for k in ("this_windowed", "other_windowed", "this", "merge")
        if names[k] in graph.nodes
    ]
    if taken:
        raise TopologyException(
            f"node {taken[0]} already exists: give the join another StreamJoined.with_name"
        )
    return names


def _stores(
    graph: GraphBuilder,
    named: StreamJoined,
    names: dict[str, str],
    left_outer: bool,
    right_outer: bool,
) -> tuple[str, str, str | None]:
    """The two buffers' and the waiting records' store names (Kafka's)."""
    base = named.store_name
    this_store = (
        f"{base}{names['this_suffix']}-store" if base else f"{names['this_generated']}-store"
    )
    other_store = (
        f"{base}{names['other_suffix']}-store" if base else f"{names['other_generated']}-store"
    )
    waiting = None
    if left_outer:
        suffix = "-outer-shared-join" if right_outer else "-left-shared-join"
        if base:
            waiting = f"{base}{suffix}-store"
        else:
            number = names["this_generated"].rsplit("-", 1)[1]
            waiting = f"KSTREAM-OUTERSHARED-{number}-store"
    for store in (this_store, other_store, waiting):
        if store is not None and store in graph.stores:
            raise TopologyException(
                f"node {names['this']}: store {store!r} already exists; name the join's stores "
                "with StreamJoined.as_(name)"
            )
    return this_store, other_store, waiting
