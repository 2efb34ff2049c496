"""``Suppressed`` and ``BufferConfig`` (KIP-328), and the DSL wiring of ``KTable.suppress``.

``Suppressed.until_window_closes(buffer_config)`` emits one final result per windowed key,
once stream time passes the window's end plus its grace; it needs a *strict* buffer config
(one that never emits early: ``unbounded()``, ``shut_down_when_full()``,
``spill_to_disk_when_full()``). ``Suppressed.until_time_limit(duration, buffer_config)``
emits each key's latest update ``duration`` after its first buffered update (the timer is
not restarted by later updates; ``timedelta(0)`` forwards everything).

``BufferConfig`` says how much the buffer may hold and what happens beyond:

================================  ====================================================
``max_records(n)``, ``max_bytes(n)``  bounded, emits the oldest early when full (eager)
``unbounded()``, ``with_no_bound()``  no bound (strict)
``.with_max_records(n)``, ``.with_max_bytes(n)``  another bound, same strategy
``.emit_early_when_full()``           eager: evicts oldest first to stay within the bound
``.shut_down_when_full()``            strict: a full buffer fails the batch, naming itself
``.spill_to_disk_when_full()``        strict: entries live in the task's RocksDB store, not
                                      in memory; the bound is not enforced
================================  ====================================================

Both are immutable; every method returns a new object. The node is named
``KTABLE-SUPPRESS-<n>`` and its buffer store ``KTABLE-SUPPRESS-STATE-STORE-<n>``;
``with_name(name)`` names the node ``name`` and its store ``<name>-store`` (as Kafka does),
which is also the store's Delta state table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from lakestate.dsl.arguments import duration_ms
from lakestate.dsl.builder import GraphBuilder
from lakestate.dsl.names import check_store_name
from lakestate.errors import TopologyException
from lakestate.processors.suppress import EMIT_EARLY, SHUT_DOWN, SPILL_TO_DISK, Suppress
from lakestate.serdes import DEFAULT_SERDES, TopicSerdes, base_key_serde
from lakestate.topology.graph import StoreSpec

SUPPRESSION_BUFFER = "suppression_buffer"
PROCESSOR_PREFIX = "KTABLE-SUPPRESS-"
STORE_PREFIX = "KTABLE-SUPPRESS-STATE-STORE-"
STORE_SUFFIX = "-store"
UNTIL_WINDOW_CLOSES = "until_window_closes"
UNTIL_TIME_LIMIT = "until_time_limit"


def _limit(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TopologyException(f"BufferConfig: {what} must be an int >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class BufferConfig:
    """How much a suppression buffer holds (``record_limit`` entries, ``byte_limit`` bytes;
    None: no bound) and what it does when full (``when_full``: "emit_early", "shut_down"
    or "spill_to_disk")."""

    record_limit: int | None = None
    byte_limit: int | None = None
    when_full: str = SHUT_DOWN

    @staticmethod
    def max_records(n: int) -> BufferConfig:
        """At most ``n`` keys; emits the oldest early when full."""
        return BufferConfig(_limit(n, "max_records"), None, EMIT_EARLY)

    @staticmethod
    def max_bytes(n: int) -> BufferConfig:
        """At most ``n`` bytes; emits the oldest early when full."""
        return BufferConfig(None, _limit(n, "max_bytes"), EMIT_EARLY)

    @staticmethod
    def unbounded() -> BufferConfig:
        """No bound: strict (never emits early)."""
        return BufferConfig(None, None, SHUT_DOWN)

    def with_max_records(self, n: int) -> BufferConfig:
        return replace(self, record_limit=_limit(n, "with_max_records"))

    def with_max_bytes(self, n: int) -> BufferConfig:
        return replace(self, byte_limit=_limit(n, "with_max_bytes"))

    def with_no_bound(self) -> BufferConfig:
        """No bound: strict (as ``unbounded()``)."""
        return BufferConfig(None, None, SHUT_DOWN)

    def emit_early_when_full(self) -> BufferConfig:
        return replace(self, when_full=EMIT_EARLY)

    def shut_down_when_full(self) -> BufferConfig:
        return replace(self, when_full=SHUT_DOWN)

    def spill_to_disk_when_full(self) -> BufferConfig:
        return replace(self, when_full=SPILL_TO_DISK)

    @property
    def is_strict(self) -> bool:
        """True when the buffer never emits early (everything but emit_early_when_full)."""
        return self.when_full != EMIT_EARLY


@dataclass(frozen=True)
class Suppressed:
    """What ``KTable.suppress`` suppresses: build with ``until_window_closes`` or
    ``until_time_limit``; ``with_name`` names the node and its buffer."""

    mode: str
    buffer_config: BufferConfig
    time_limit_ms: int | None = None
    name: str | None = None

    @staticmethod
    def until_window_closes(buffer_config: BufferConfig) -> Suppressed:
        """One final result per windowed key, once its window has closed (end + grace)."""
        _check_config(buffer_config)
        if not buffer_config.is_strict:
            raise TopologyException(
                "Suppressed.until_window_closes needs a strict BufferConfig (unbounded(), "
                ".shut_down_when_full() or .spill_to_disk_when_full()): emitting early would "
                f"break the one-final-result guarantee; got {buffer_config}"
            )
        return Suppressed(UNTIL_WINDOW_CLOSES, buffer_config)

    @staticmethod
    def until_time_limit(duration: timedelta, buffer_config: BufferConfig) -> Suppressed:
        """Each key's latest update, ``duration`` after its first buffered update."""
        _check_config(buffer_config)
        ms = duration_ms(duration, "duration", "Suppressed.until_time_limit")
        return Suppressed(UNTIL_TIME_LIMIT, buffer_config, ms)

    def with_name(self, name: str) -> Suppressed:
        check_store_name(name, "Suppressed.with_name")
        return replace(self, name=name)


def _check_config(buffer_config: Any) -> None:
    if not isinstance(buffer_config, BufferConfig):
        raise TopologyException(
            f"Suppressed needs a BufferConfig (e.g. BufferConfig.unbounded()), got {buffer_config!r}"
        )


def _buffer_serdes(serdes: TopicSerdes) -> TopicSerdes:
    """The suppression buffer's serdes: the table's (Kafka's buffer serializes with them)
    where its key's or value's converts (Bytes: the buffer holds their JSON form and gives
    the bytes back, state/serde_checked.py); else Json, the buffer as it always was."""
    if base_key_serde(serdes.key).json_form_differs or serdes.value.json_form_differs:
        return serdes
    return DEFAULT_SERDES


def add_suppression(
    graph: GraphBuilder,
    parent: str,
    suppressed: Suppressed,
    window_grace_ms: int | None,
    parent_store_kind: str | None,
    serdes: TopicSerdes = DEFAULT_SERDES,
) -> str:
    """Add a suppress node after table node ``parent`` (whose table has ``serdes``);
    returns its name."""
    if not isinstance(suppressed, Suppressed):
        raise TopologyException(
            f"KTable.suppress needs a Suppressed (e.g. Suppressed.until_time_limit(...)), "
            f"got {suppressed!r}"
        )
    name = suppressed.name or graph.new_name(PROCESSOR_PREFIX)
    if name in graph.nodes:
        raise TopologyException(f"suppress: a node named {name!r} already exists")
    if parent_store_kind == "versioned":
        raise TopologyException(
            f"node {name}: suppress is not supported on a versioned table (KIP-914): "
            "materialize the table with a key-value store first"
        )
    if suppressed.mode == UNTIL_WINDOW_CLOSES:
        if window_grace_ms is None:
            raise TopologyException(
                f"node {name}: until_window_closes is only defined for windowed tables "
                "(a windowed aggregation's result); use until_time_limit on other tables"
            )
        final_results, duration = True, window_grace_ms
    else:
        final_results, duration = False, suppressed.time_limit_ms
    store = f"{name}{STORE_SUFFIX}" if suppressed.name else graph.new_name(STORE_PREFIX)
    config = suppressed.buffer_config
    spill = config.when_full == SPILL_TO_DISK
    options = {"spill_to_disk": spill}
    spec = StoreSpec(store, SUPPRESSION_BUFFER, options, serdes=_buffer_serdes(serdes))
    graph.add_store(spec, name)

    def factory() -> Suppress:
        return Suppress(
            name,
            store,
            final_results,
            duration,
            config.record_limit,
            config.byte_limit,
            config.when_full,
        )

    graph.add_processor(name, parent, factory, [store])
    return name
