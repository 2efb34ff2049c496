"""``DeltaSource``: an existing Delta table that other writers append to, read as a topic.

A plain description (the DSL and the I/O layer both take it): the table, the key column(s),
the event-time column, the partition count the app chooses and where the stream starts.
``lakestate.io.deltasource`` declares it in a warehouse and reads it as a topic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from typing import Union

from lakestate.warehouse import validate_name

#: Where a stream over a Delta table starts: ``"earliest"`` (version 0), ``"latest"`` (the
#: first version committed after the source is declared), a table version (an int) or a
#: time (a ``datetime``: the first version committed at or after it).
Starting = Union[str, int, datetime]  # noqa: UP007 (a runtime alias)


@dataclass(frozen=True)
class DeltaSource:
    """A stream over the Delta table at ``table`` (a URI, or a local path, made absolute),
    as topic ``name``.

    ``key``: the key column, or columns (the key is then a dict of them); ``timestamp``:
    the event-time column (a timestamp, a date or epoch milliseconds; None, or a NULL in
    a row: the commit's time); ``partitions``: the topic's partition count (a row goes to
    the partition of Kafka's murmur2 of its key, as a log table's record); ``starting``:
    see ``Starting``; ``skip_change_commits``: a commit that deletes or rewrites rows
    (DELETE, UPDATE, MERGE, an overwrite) is skipped whole, as Spark's Delta source's
    ``skipChangeCommits``, instead of failing the run. Every column of a row becomes a field
    of the record's value.
    """

    name: str
    table: str
    key: str | tuple[str, ...]
    timestamp: str | None = None
    partitions: int = 1
    starting: Starting = "earliest"
    skip_change_commits: bool = False

    def __post_init__(self) -> None:
        validate_name("topic", self.name)
        if not isinstance(self.table, str | os.PathLike) or not os.fspath(self.table):
            raise ValueError(f"DeltaSource {self.name!r}: table must be a path, got {self.table!r}")
        table = os.fspath(self.table)
        if "://" not in table:  # a local path: the same table from any working directory
            table = os.path.abspath(table)
        object.__setattr__(self, "table", table)
        keys = (self.key,) if isinstance(self.key, str) else tuple(self.key)
        if not keys or not all(isinstance(k, str) and k for k in keys):
            raise ValueError(
                f"DeltaSource {self.name!r}: key must be a column name or a list of them, "
                f"got {self.key!r}"
            )
        object.__setattr__(self, "key", keys[0] if len(keys) == 1 else keys)
        n = self.partitions
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(
                f"DeltaSource {self.name!r}: partitions must be an int >= 1, got {n!r}"
            )
        s = self.starting
        ok = (
            s in ("earliest", "latest")
            or (isinstance(s, int) and not isinstance(s, bool) and s >= 0)
            or isinstance(s, datetime)
        )
        if not ok:
            raise ValueError(
                f"DeltaSource {self.name!r}: starting must be 'earliest', 'latest', a table "
                f"version (an int >= 0) or a datetime, got {s!r}"
            )

    @property
    def key_columns(self) -> tuple[str, ...]:
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)


__all__ = ["DeltaSource", "Starting"]
