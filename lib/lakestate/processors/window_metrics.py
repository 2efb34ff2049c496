"""The metrics of a windowed aggregation (time, session and sliding windows): late-record
drops and record lateness, as Kafka's sensors give them, totals kept as processor metadata.
"""

from __future__ import annotations

from typing import Any

NO_TIME = -1


# Metric totals kept as processor metadata, so they add up over batches and restarts.
_TOTALS = ("late-record-drop-total", "record-lateness-count", "record-lateness-sum")
_MAX = "record-lateness-max"
# Set once a record reached the node: the derived late-record-drop-rate replaces it.
_RATE_SHOWN = "late-record-drop-rate"


class Lateness:
    """The late-record and lateness metrics of one chunk."""

    def __init__(self) -> None:
        self.late_drops = 0
        self.null_keys = 0
        self.count = 0
        self.total = 0
        self.max = 0
        # Observed stream time after the chunk's first keyed record: where emit-rate's
        # span starts when the node has none yet (as record by record starts it).
        self.first_observed: int | None = None

    def record(self, lateness: int) -> None:
        self.count += 1
        self.total += lateness
        if lateness > self.max:
            self.max = lateness


class WindowMetrics:
    """One windowed aggregation's metrics, all of its node: ``dropped-records`` (null keys
    and late records; a count), and values derived from totals kept as processor metadata
    of the node's store (so they survive batches and restarts): ``late-record-drop-total``
    and ``-rate`` (per second of stream time the node has seen), ``record-lateness-avg``
    and ``-max``. The values are worked out when the metrics are read (``derive_metrics``),
    from the totals; each is shown once the node has set it as Kafka's sensors would: the
    totals once they are above zero (or, the lateness sum and average, once a record
    reached the node in this task), the rate once any record reached the node."""

    def __init__(self, context: Any, store_name: str) -> None:
        self.context = context
        self.prefix = f"{store_name}."
        self.first_key = f"{store_name}.first-stream-time"
        self._time_key = f"{store_name}.observed_stream_time"
        self.pending: Lateness | None = None
        # Lateness samples when the task opened: a record since shows the sum and average.
        self._opening_count = context.processor_metadata(self.prefix + _TOTALS[1]) or 0
        context.derive_metrics(self._values)

    def _values(self, set_: Any) -> list[tuple[str, float, None]]:
        held, prefix = self.context.processor_metadata, self.prefix
        drops, count, total = (held(prefix + name) or 0 for name in _TOTALS)
        most = held(prefix + _MAX) or 0
        shown: list[tuple[str, float, None]] = []
        if drops:
            shown.append(("late-record-drop-total", drops, None))
        if count:
            shown.append(("record-lateness-count", count, None))
        reached = count > self._opening_count
        if total or reached:
            shown.append(("record-lateness-sum", total, None))
        if reached:
            shown.append(("record-lateness-avg", total / count, None))
        if most:
            shown.append((_MAX, most, None))
        if set_(_RATE_SHOWN) is not None:
            observed = held(self._time_key)
            observed = NO_TIME if observed is None else observed
            first = held(self.first_key)
            first = observed if first is None else first
            seconds = max(1.0, (observed - first) / 1000)
            shown.append(("late-record-drop-rate", drops / seconds, None))
        return shown

    def publish(self, chunk: Lateness, observed: int) -> None:
        """Count a chunk's dropped records (rolled back with a failed chunk); its totals
        are kept as metadata by ``keep``, from which the values are derived."""
        context = self.context
        dropped = chunk.late_drops + chunk.null_keys
        if dropped:
            context.metric("dropped-records", dropped)
        # Once a record reached the node, the rate is shown (rolled back with the chunk).
        context.set_metric(_RATE_SHOWN, 1)
        self.pending = chunk

    def keep(self, observed: int) -> None:
        """Write the last published chunk's counts into the node's metadata."""
        chunk, self.pending = self.pending, None
        if chunk is None or observed < 0:
            return
        context, prefix = self.context, self.prefix
        if context.processor_metadata(self.first_key) is None:
            first = chunk.first_observed
            context.set_processor_metadata(self.first_key, observed if first is None else first)
        for name, delta in zip(_TOTALS, (chunk.late_drops, chunk.count, chunk.total), strict=True):
            if delta:
                held = context.processor_metadata(prefix + name) or 0
                context.set_processor_metadata(prefix + name, held + delta)
        if chunk.max > (context.processor_metadata(prefix + _MAX) or 0):
            context.set_processor_metadata(prefix + _MAX, chunk.max)
