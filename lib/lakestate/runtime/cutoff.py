"""A run's timestamp cut (``run_app(until_timestamp=...)``): what a backfill of an interval
processes.

A run with a cut processes, in each input partition, the records from where its task
stands, in offset order, up to (not including) the first record stamped at or after the
cut; it never skips a record to reach a later one, so offset order is never broken. A
record stamped before the cut but appended after a record stamped at or after it (a late
record) is processed by the run that reaches it in offset order: a later interval's run,
or the next scheduled run. Every record a cut run processes is stamped before the cut.

The cut applies to every input of every sub-topology, repartition topics included (by the
timestamps of their records, which the upstream task gave them), so that a record that
crosses sub-topologies reaches its sink in the same run. It does not apply to global
tables' topics: as in Kafka Streams, whose global stores are bootstrapped to the end of
their topics whatever the records' timestamps, a task reads them to their ends (a backfill
of last week joins against the reference data of now, as any run does).

A partition's cut is found with delta-rs (no JVM): the first offset at or after the
task's start whose timestamp is at or after the cut, reading only the files whose
statistics (per-file min/max of partition, offset and timestamp) may hold such a record.
A log table is append-only, so a cut found once holds for the rest of the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pyarrow.compute as pc
from lakestate.io import delta_commits
from lakestate.warehouse import Warehouse


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds from ``text``: an integer (milliseconds) or an ISO 8601 time
    (``2026-11-24T10:00:00Z``; without an offset: UTC). A clear ``ValueError`` otherwise."""
    value = text.strip()
    try:
        return int(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a timestamp: {text!r} (expected epoch milliseconds or an ISO time such as "
            "2026-11-24T10:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def format_timestamp(ms: int) -> str:
    """``ms`` as an ISO time in UTC, for messages."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


class Cutoff:
    """The cut of one run: ``ends`` clips a topic's end offsets to the first record stamped
    at or after ``until_timestamp`` (exclusive), remembering each cut it finds."""

    def __init__(self, warehouse: Warehouse, until_timestamp: int) -> None:
        self.warehouse = warehouse
        self.until_timestamp = until_timestamp
        self._found: dict[tuple[str, int], int] = {}  # (topic, partition) -> cut offset

    def ends(
        self, topic: str, ends: Mapping[int, int], starts: Mapping[int, int]
    ) -> dict[int, int]:
        """``ends`` with the end of each partition in ``starts`` lowered to its cut: the
        first offset in ``[starts[p], ends[p])`` stamped at or after the cut; the end itself
        when there is none. Partitions not in ``starts`` (no task of the run reads them)
        keep their ends."""
        clipped = dict(ends)
        search: dict[int, tuple[int, int]] = {}
        for p, start in starts.items():
            end = ends.get(p, 0)
            found = self._found.get((topic, p))
            if found is not None:
                clipped[p] = min(end, found)
            elif end > start:
                search[p] = (start, end)
        for p, offset in self._first_stamped(topic, search).items():
            self._found[(topic, p)] = offset
            clipped[p] = offset
        return clipped

    def _first_stamped(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> dict[int, int]:
        """Per partition of ``ranges``, the first offset in its range stamped at or after
        the cut (partitions without one are left out)."""
        if not ranges:
            return {}
        bound = self.until_timestamp
        pruning = [
            [
                ("partition", "=", p),
                ("offset", ">=", start),
                ("offset", "<", end),
                ("timestamp", ">=", bound),
            ]
            for p, (start, end) in sorted(ranges.items())
        ]
        exact = None
        for p, (start, end) in sorted(ranges.items()):
            one = (
                (pc.field("partition") == p)
                & (pc.field("offset") >= start)
                & (pc.field("offset") < end)
            )
            exact = one if exact is None else exact | one
        exact = exact & (pc.field("timestamp") >= bound)
        table = delta_commits.open_table(self.warehouse.topic_path(topic))
        rows = table.to_pyarrow_dataset(file_pruning_predicate=pruning).to_table(
            columns=["partition", "offset"], filter=exact
        )
        if rows.num_rows == 0:
            return {}
        firsts = rows.group_by("partition").aggregate([("offset", "min")])
        return dict(
            zip(
                pc.cast(firsts.column("partition"), "int64").to_pylist(),
                firsts.column("offset_min").to_pylist(),
                strict=True,
            )
        )


__all__ = ["Cutoff", "format_timestamp", "parse_timestamp"]
