"""A task's metrics, scoped as Kafka Streams tags them, and how they add up over batches.

Scopes: a processor node (Kafka's ``processor-node-id`` tag) or a state store (its store
name tag). Each node counts the records it drops in its own ``dropped-records``; Kafka's
task-level ``dropped-records`` is their sum (``task_level``), so status can say where
records were dropped.

A metric is one of two kinds, by how a processor sets it:

- a *count* (``context.metric(name, delta)``): events since the task began. A test driver's
  task lives across commits and keeps counting; the engine opens a task per batch, so a
  batch reports its own counts and the engine adds them to the task's previous progress
  row (``accumulate``): the row carries the totals since the app's first batch.
- a *value* (``context.set_metric(name, value)``): a current figure, which replaces the
  previous one: a gauge (a store's size, a suppression buffer's count), or a figure a
  processor derives from totals it keeps itself as processor metadata because it needs
  them while processing (a windowed aggregation's ``late-record-drop-total``, its rate per
  second of stream time, ``record-lateness-avg`` and ``-max``; every suppress metric).
  Those totals commit, replay and restore with the task's state, so they need no adding.
  Values that are a function of such state are *derived* (``TaskMetrics.derive``): worked
  out when the metrics are read, not set on every record; a copy shares its sources, and
  since they read the task's state, a rollback of that state rolls them back too.

A replayed batch (restore/recovery.py) starts from the same previous row, so it reports the
same counts and gets the same totals; the totals never depend on batch boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

NODES = "nodes"
STORES = "stores"
#: Kafka's task-level figures (``task_level``); also where a progress row written before
#: metrics were scoped shows its flat map.
TASK = "task"
DROPPED_RECORDS = "dropped-records"

_LEVELS = (NODES, STORES)
Key = tuple[str, str, str]  # (level, scope, name)

#: A metrics document: level -> scope (node or store name) -> metric name -> value.
Document = dict[str, dict[str, dict[str, float]]]


def _nest(flat: Mapping[Key, float]) -> Document:
    doc: Document = {}
    for (level, scope, name), value in sorted(flat.items()):
        doc.setdefault(level, {}).setdefault(scope, {})[name] = value
    return doc


def _unnest(doc: Mapping[str, Any]) -> dict[Key, float]:
    return {
        (level, scope, name): value
        for level in _LEVELS
        for scope, named in (doc.get(level) or {}).items()
        for name, value in named.items()
    }


class TaskMetrics:
    """The metrics of one task: counts and values by (level, scope, name)."""

    __slots__ = ("_values", "counts", "sources")

    def __init__(
        self,
        counts: dict[Key, float] | None = None,
        values: dict[Key, float] | None = None,
        sources: list[Callable[[dict[Key, float]], None]] | None = None,
    ) -> None:
        self.counts: dict[Key, float] = counts or {}
        self._values: dict[Key, float] = values or {}
        self.sources: list[Callable[[dict[Key, float]], None]] = [] if sources is None else sources

    @property
    def values(self) -> dict[Key, float]:
        """The values set, with the derived ones worked out now."""
        if not self.sources:
            return self._values
        values = dict(self._values)
        for source in self.sources:
            source(values)
        return values

    def derive(self, source: Callable[[dict[Key, float]], None]) -> None:
        """Add ``source``: called with the values set (a copy) whenever they are read, it
        sets or updates the values it derives from state the task keeps (processor
        metadata, a store), so a processor need not set them on every record."""
        self.sources.append(source)

    def add(self, level: str, scope: str, name: str, delta: float = 1) -> None:
        """Count ``delta`` more events of ``name`` at ``scope``."""
        key = (level, scope, name)
        self.counts[key] = self.counts.get(key, 0) + delta

    def set(self, level: str, scope: str, name: str, value: float) -> None:
        """Set the current value of ``name`` at ``scope``."""
        self._values[(level, scope, name)] = value

    def get(self, level: str, scope: str, name: str) -> float:
        """The metric as it stands (0 when never counted or set)."""
        key = (level, scope, name)
        values = self.values
        if key in values:
            return values[key]
        return self.counts.get(key, 0)

    def copy(self) -> TaskMetrics:
        """A copy of the counts and values set; the derived sources are shared."""
        return TaskMetrics(dict(self.counts), dict(self._values), self.sources)

    def report(self) -> dict[str, Document]:
        """What a batch hands over (JSON-able): its counts and its values."""
        return {"counts": _nest(self.counts), "values": _nest(self.values)}

    def document(self) -> Document:
        """Counts and values together, by level and scope."""
        merged = dict(self.counts)
        merged.update(self.values)
        return _nest(merged)

    def flat(self) -> dict[str, float]:
        """Each metric name summed over scopes (the test driver's ``metrics()``)."""
        return flat(self.document())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TaskMetrics)
            and self.counts == other.counts
            and self.values == other.values
        )

    def __repr__(self) -> str:
        return f"TaskMetrics({self.document()!r})"


def is_document(metrics: Mapping[str, Any]) -> bool:
    """True for a scoped document, False for the flat ``{name: value}`` map of a progress
    row written before metrics were scoped (each task's last batch only)."""
    return all(isinstance(v, Mapping) for v in metrics.values())


def accumulate(previous: Mapping[str, Any] | None, report: Mapping[str, Any]) -> Document:
    """The totals after a batch: ``previous`` (the task's last progress row's document; a
    flat map of an older row counts as none, since it held one batch's figures) plus the
    batch's counts, with its values replacing the previous ones."""
    totals = _unnest(previous) if previous and is_document(previous) else {}
    for key, delta in _unnest(report.get("counts") or {}).items():
        totals[key] = totals.get(key, 0) + delta
    totals.update(_unnest(report.get("values") or {}))
    return _nest(totals)


def task_level(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Kafka's task-level metrics of a document: ``dropped-records`` summed over the
    nodes. A flat map of an older row is shown as it is."""
    if not is_document(metrics):
        return dict(metrics)
    dropped = sum(named.get(DROPPED_RECORDS, 0) for named in (metrics.get(NODES) or {}).values())
    return {DROPPED_RECORDS: dropped}


def flat(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Each metric name summed over a document's scopes (a flat map as it is)."""
    if not is_document(metrics):
        return dict(metrics)
    total: dict[str, float] = {}
    for (_, _, name), value in _unnest(metrics).items():
        total[name] = total.get(name, 0) + value
    return total


__all__ = [
    "DROPPED_RECORDS",
    "NODES",
    "STORES",
    "TASK",
    "Document",
    "TaskMetrics",
    "accumulate",
    "flat",
    "is_document",
    "task_level",
]
