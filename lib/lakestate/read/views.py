"""What users ask of a warehouse: SQL over every topic and store, and an app's status.

A store's SQL view is its current state: per task and key, the changelog row with the
highest ``batch_id`` up to the task's pinned batch, tombstones removed. All stores of an app
are pinned together: each task at its last complete batch (or at ``batch`` when given, if
it got that far). A task pinned before the batch compaction folded its rows through is read
at the table version from before that compaction (``read.time_travel``), until VACUUM
removes it: a view pinned to a batch answers the same before and after a compaction. The
raw changelog is registered beside it (``<app>__<store>__changelog``), read at the table
version the pin was checked at, so both answer the same until they are registered again.

A store with serdes (``Materialized.with_``, ``Grouped.with_``; recorded in the app's
layout) has its state view's ``key`` and ``value`` columns typed by them: a String as text
(``c1``, not the JSON ``"c1"``), a Long as BIGINT, an Integer as INT, a Double as DOUBLE,
Bytes as BINARY; Json stays JSON text. The changelog keeps the JSON text; the view casts.

What each view holds is decided here once (``views``: which tables, at which versions, and
for a store's state the SQL that selects it, ``View.select``); the engines only read the
tables and run that SQL: Spark (``lakestate.read.spark_engine``) and DuckDB
(``lakestate.read.duckdb_engine``), so neither imports the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from lakestate.assign.history import assignment_path
from lakestate.checkpoint import recorded_layout
from lakestate.checkpoint.changelog import SNAPSHOT_COLUMN, compaction_txn_id
from lakestate.checkpoint.standing import AppPin, app_pin
from lakestate.delta_sink import META_COLUMNS, OFFSET
from lakestate.io import delta_commits, delta_log
from lakestate.io.deltasink import declaration as sink_declaration
from lakestate.read import time_travel
from lakestate.read.status import format_time
from lakestate.scaleout.lag_reports import reports_path
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

CHANGELOG_SUFFIX = "__changelog"
#: A Delta sink's current state: its latest row per key (``<sink>__latest``).
LATEST_SUFFIX = "__latest"
# An app's scale-out tables, as views <app>__<suffix>.
ASSIGNMENT_VIEW = "assignment"
INSTANCES_VIEW = "instances"


def view_name(name: str) -> str:
    """The SQL name of a table: ``-`` and ``.`` become ``_`` so names need no quoting
    (topic ``event-counts`` is ``event_counts``; store ``counts`` of app ``demo`` is
    ``demo__counts``)."""
    return name.replace("-", "_").replace(".", "_")


#: The condition of a pin that selects no task.
_NO_TASK = "false"


@dataclass(frozen=True)
class _StorePin:
    """How a store's changelog is read at an app pin: at table ``version`` (the one the pin
    was checked at), its rows that meet ``condition`` (SQL). ``snapshot_only`` is True when
    every task is pinned at exactly the batch its rows were compacted through, so no row of
    the pin lies in a tail and those rows are the state as they are. ``older``: the tasks
    pinned before the batch they were compacted through, each read at the older table
    version from before that compaction (Delta time travel, ``read.time_travel``), as pins
    of their own."""

    version: int
    condition: str
    snapshot_only: bool
    older: tuple[_StorePin, ...] = ()

    def parts(self) -> list[_StorePin]:
        """The pins to read and union, each at its version over its own tasks: this one
        (unless every task is read at an older version), then ``older``'s."""
        here = [] if self.older and self.condition == _NO_TASK else [self]
        return here + list(self.older)


def _store_pin(app: str, pin: AppPin, changelog_path: str) -> _StorePin:
    """The pin of one store. A task pinned before the batch its rows were compacted through
    is read at the table version from before that compaction; ValueError when VACUUM (or
    the log's cleanup) has removed that version."""
    subs = pin.writers.get(changelog_path, set())
    table = pin.tables.get(changelog_path) or delta_commits.open_table(changelog_path)
    pinned = {t: b for t, b in sorted(pin.batches.items()) if t.subtopology in subs}
    past = {t: b for t, b in pinned.items() if b < _compacted(table, app, t)}
    older = tuple(
        _tasks_pin(app, old, tasks)
        for old, tasks in time_travel.older_versions(app, changelog_path, table, past)
    )
    here = {t: b for t, b in pinned.items() if t not in past}
    return replace(_tasks_pin(app, table, here), older=older)


def _compacted(table: DeltaTable, app: str, task: TaskId) -> int:
    """The batch ``task``'s rows of ``table`` are compacted through (0: never)."""
    return table.transaction_version(compaction_txn_id(app, task)) or 0


def _tasks_pin(app: str, table: DeltaTable, pinned: dict[TaskId, int]) -> _StorePin:
    """The pin of tasks ``pinned`` (task -> batch) in ``table`` as it is, none of them
    compacted past its batch there."""
    if not pinned:
        return _StorePin(table.version(), _NO_TASK, True)
    snapshot_only = all(b == _compacted(table, app, t) for t, b in pinned.items())
    # The partition filter prunes the files of tasks outside the pin.
    tasks = f"task IN ({', '.join(str(t.partition) for t in pinned)})"
    if snapshot_only:
        # A task's snapshot rows hold its state as of the batch compacted through (its
        # compaction replaced every row of batches up to there, and its later batches'
        # rows are not snapshot rows), so the batch condition is implied.
        conditions = [tasks, *_snapshot_conditions(table, [t.partition for t in pinned])]
        return _StorePin(table.version(), " AND ".join(conditions), True)
    cases = " ".join(f"WHEN {t.partition} THEN {b}" for t, b in pinned.items())
    return _StorePin(table.version(), f"{tasks} AND batch_id <= CASE task {cases} END", False)


def _snapshot_conditions(table: DeltaTable, partitions: list[int]) -> list[str]:
    """What selects the live snapshot rows of tasks ``partitions``: not a tail row, not a
    tombstone (a snapshot keeps one when all its keys are deleted); each left out when the
    statistics of the tasks' files show that no row fails it."""
    adds = pa.table(table.get_add_actions(flatten=True))
    if adds.num_rows == 0:
        return []
    mine = adds.filter(
        pc.is_in(
            adds.column("partition.task"),
            pa.array(partitions, pa.int64()).cast(adds.column("partition.task").type),
        )
    ).to_pylist()
    tails = [f.get("null_count." + SNAPSHOT_COLUMN) for f in mine]
    tombstones = [
        0 if tail is not None and tail == f.get("num_records") else f.get("null_count.raw_value")
        for f, tail in zip(mine, tails, strict=True)
    ]
    conditions = []
    if any(n is None or n > 0 for n in tails):
        conditions.append(f"{SNAPSHOT_COLUMN} IS NOT NULL")
    if any(n is None or n > 0 for n in tombstones):
        conditions.append("raw_value IS NOT NULL")
    return conditions


def state_sql(
    source: str, pin: _StorePin, columns: Sequence[str], quote: Callable[[str], str]
) -> str:
    """The current state of a store as one SELECT over ``source`` (its changelog read at
    ``pin.version``, with ``columns``), in SQL that Spark and DuckDB both run (``quote``
    quotes a column name for the engine): per task and key, the row with the highest
    batch_id up to the pin, unless a tombstone. Rows compaction wrote (``snapshot_through``
    set) hold one row per key and are older than every other row of their task, so they
    need no ranking: a snapshot row stands unless a newer row of its key follows it (an
    anti-join with the tail's keys); only the tail since the last compaction is ranked.
    When the pin has no tail (every task pinned at its compaction), the pin's rows are the
    state as they are."""
    pinned = f"SELECT * FROM {source} WHERE {pin.condition}"
    if pin.snapshot_only:
        return pinned
    listed = ", ".join(quote(c) for c in columns)
    return (
        f"WITH pinned AS ({pinned}), "
        f"tail AS (SELECT * FROM pinned WHERE {SNAPSHOT_COLUMN} IS NULL), "
        "ranked AS (SELECT *, row_number() OVER "
        "(PARTITION BY task, raw_key ORDER BY batch_id DESC) AS _lakestate_rank FROM tail) "
        f"SELECT {listed} FROM pinned AS s WHERE s.{SNAPSHOT_COLUMN} IS NOT NULL "
        "AND s.raw_value IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM tail AS t WHERE t.task = s.task AND t.raw_key = s.raw_key) "
        f"UNION ALL SELECT {listed} FROM ranked "
        "WHERE _lakestate_rank = 1 AND raw_value IS NOT NULL"
    )


@dataclass(frozen=True)
class View:
    """A view of the warehouse: its SQL ``name``, the Delta table at ``path`` it reads (at
    table ``version``; None: the newest), and for a store's current state the ``pin``
    that selects its rows (None: the table as it is: a topic, a raw changelog)."""

    name: str
    path: str
    version: int | None = None
    pin: _StorePin | None = None
    # A Delta sink's latest row per key: its key columns.
    latest_of: tuple[str, ...] | None = None
    # A store's state: its columns typed by its serdes, (column, serde name) each.
    types: tuple[tuple[str, str], ...] = ()

    def versions(self) -> list[int | None]:
        """The table versions the view reads, one source each: a store pin's parts'
        (several when some tasks are read from before a compaction), else ``version``."""
        if self.pin is None:
            return [self.version]
        return [p.version for p in self.pin.parts()]

    def select(
        self, sources: Sequence[str], columns: Sequence[str], quote: Callable[[str], str]
    ) -> str:
        """The view as one SELECT over ``sources``, the table read at each of
        ``versions()`` (with ``columns``); ``quote`` quotes a column name for the engine
        running it."""
        if self.latest_of is not None:
            return latest_sql(sources[0], self.latest_of, columns, quote)
        if self.pin is None:
            return f"SELECT * FROM {sources[0]}"
        parts = self.pin.parts()
        listed = ", ".join(quote(c) for c in columns)
        if len(parts) == 1:
            select = state_sql(sources[0], parts[0], columns, quote)
        else:
            select = " UNION ALL ".join(
                f"SELECT {listed} FROM ({state_sql(source, part, columns, quote)}) AS _part{i}"
                for i, (source, part) in enumerate(zip(sources, parts, strict=True))
            )
        if not self.types:
            return select
        types = dict(self.types)
        typed = ", ".join(typed_column(c, types.get(c), quote) for c in columns)
        return f"SELECT {typed} FROM ({select}) AS _typed"


# A store column's JSON text as its serde's SQL type, in SQL that Spark and DuckDB both run
# (DuckDB has Spark's get_json_object and unbase64: read.spark_dialect).
_TYPED = {
    "Serdes.String()": "get_json_object({c}, '$')",
    "Serdes.Long()": "CAST({c} AS BIGINT)",
    "Serdes.Integer()": "CAST({c} AS INT)",
    "Serdes.Double()": "CAST({c} AS DOUBLE)",
    "Serdes.Bytes()": "unbase64(get_json_object({c}, '$'))",
}


def typed_column(column: str, serde: str | None, quote: Callable[[str], str]) -> str:
    """``column`` as a state view shows it: typed by ``serde`` (its name; None or Json:
    the JSON text as it is)."""
    template = _TYPED.get(serde or "")
    if template is None:
        return quote(column)
    return f"{template.format(c=quote(column))} AS {quote(column)}"


def store_types(warehouse: Warehouse, app: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per store of ``app`` with serdes other than Json (as its last run recorded them):
    its state view's typed columns, ``(("key", serde name), ("value", serde name))``."""
    recorded = recorded_layout.read(warehouse.layout_path(app))
    if recorded is None:
        return {}
    return {
        store: (("key", key), ("value", value))
        for store, (key, value) in recorded.store_serdes.items()
    }


def latest_sql(
    source: str, keys: Sequence[str], columns: Sequence[str], quote: Callable[[str], str]
) -> str:
    """A Delta sink's current state as one SELECT over ``source`` (its table, with
    ``columns``): per key, its row with the highest ``_offset`` (a key's rows are in one
    partition, in append order), unless that row's value columns are all null (a tombstone:
    the key is deleted). Spark and DuckDB both run it."""
    listed = ", ".join(quote(c) for c in columns)
    by = ", ".join(quote(k) for k in keys if k in columns) or "1"
    values = [c for c in columns if c not in keys and c not in META_COLUMNS]
    live = " OR ".join(f"_latest.{quote(c)} IS NOT NULL" for c in values) or "true"
    ranked = (
        f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {by} ORDER BY {quote(OFFSET)} DESC) "
        f"AS _lakestate_rank FROM {source}"
    )
    return f"SELECT {listed} FROM ({ranked}) AS _latest WHERE _lakestate_rank = 1 AND ({live})"


def _sink_views(warehouse: Warehouse, registers: Callable[[str], bool]) -> list[View]:
    """Each Delta sink whose table exists: the table (``<sink>``) and its latest row per
    key (``<sink>__latest``)."""
    found = []
    for name in warehouse.list_sinks():
        declared = sink_declaration.read(warehouse, name)
        if declared is None or not delta_commits.table_exists(declared.sink.table):
            continue
        table, keys = declared.sink.table, declared.sink.key_columns
        if registers(view_name(name)):
            found.append(View(view_name(name), table))
        if registers(view_name(name) + LATEST_SUFFIX):
            found.append(View(view_name(name) + LATEST_SUFFIX, table, latest_of=keys))
    return found


def views(
    warehouse: Warehouse,
    batch: int | None = None,
    batch_app: str | None = None,
    only: Collection[str] | None = None,
) -> list[View]:
    """Every topic (by name), every store (``<app>__<store>``, its state, and
    ``<app>__<store>__changelog``) and an app's scale-out tables as they are
    (``<app>__assignment``: every generation, a row per task; ``<app>__instances``: the
    instances' lag reports), or only the views named in ``only`` (any case); ``batch`` pins
    app ``batch_app`` only. ValueError for a batch that cannot be read."""
    wanted = None if only is None else {n.lower() for n in only}

    def registers(name: str) -> bool:
        return wanted is None or name.lower() in wanted

    found: list[View] = []
    for topic in warehouse.list_topics():
        if registers(view_name(topic)):
            found.append(View(view_name(topic), warehouse.topic_path(topic)))
    found += _sink_views(warehouse, registers)
    for app in warehouse.list_apps():
        tables = [(t, view_name(f"{app}__{t.store}")) for t in warehouse.list_state_tables(app)]
        states = [(t, n) for t, n in tables if registers(n)]
        changelogs = [(t, n) for t, n in tables if registers(n + CHANGELOG_SUFFIX)]
        pin = None
        if states or (app == batch_app and changelogs):
            pin = app_pin(warehouse, app, batch if app == batch_app else None)
        store_pins = {t.path: _store_pin(app, pin, t.path) for t, _ in states}
        types = store_types(warehouse, app) if states else {}
        for table, name in changelogs:
            # Read at the version its state view is pinned at, so both answer the same.
            version = store_pins[table.path].version if table.path in store_pins else None
            found.append(View(name + CHANGELOG_SUFFIX, table.path, version))
        for table, name in states:
            store_pin = store_pins[table.path]
            typed = types.get(table.store, ())
            found.append(View(name, table.path, store_pin.version, store_pin, types=typed))
        for suffix, path in (
            (ASSIGNMENT_VIEW, assignment_path(warehouse, app)),
            (INSTANCES_VIEW, reports_path(warehouse, app)),
        ):
            name = view_name(f"{app}__{suffix}")
            if registers(name) and delta_commits.table_exists(path):
                found.append(View(name, path))
    return found


def pinned_app(warehouse: Warehouse, query: str, batch: int | None) -> str | None:
    """The app whose stores ``--batch`` pins: the one app ``query`` names (None without a
    batch); ValueError when it names none or several."""
    if batch is None:
        return None
    named = apps_named(warehouse, query)
    if len(named) != 1:
        raise ValueError(
            f"--batch {batch} applies to one app, but the query names the stores of "
            + (", ".join(named) if named else "none")
        )
    return named[0]


@dataclass(frozen=True)
class ViewInfo:
    """One view of the warehouse: its SQL ``name``, its ``kind`` (``topic``, ``state``: a
    store's current state, ``changelog``: a store's raw changelog, ``delta_sink``: a Delta
    sink's table, ``latest``: its latest row per key, ``assignment``, ``instances``) and
    what it shows (``of``: the topic, ``<app>/<store>``, or the app)."""

    name: str
    kind: str
    of: str


def list_views(warehouse: Warehouse) -> list[ViewInfo]:
    """Every view of the warehouse (what ``views`` registers when every one is asked for),
    without opening a table: topics, then per app its stores' state and changelog views
    and its scale-out tables."""
    found = [ViewInfo(view_name(t), "topic", t) for t in warehouse.list_topics()]
    for sink in warehouse.list_sinks():
        found += [
            ViewInfo(view_name(sink), "delta_sink", sink),
            ViewInfo(view_name(sink) + LATEST_SUFFIX, "latest", sink),
        ]
    for app in warehouse.list_apps():
        for table in warehouse.list_state_tables(app):
            name, of = view_name(f"{app}__{table.store}"), f"{app}/{table.store}"
            found += [
                ViewInfo(name, "state", of),
                ViewInfo(name + CHANGELOG_SUFFIX, "changelog", of),
            ]
        for suffix, path in (
            (ASSIGNMENT_VIEW, assignment_path(warehouse, app)),
            (INSTANCES_VIEW, reports_path(warehouse, app)),
        ):
            if _exists(path):
                found.append(ViewInfo(view_name(f"{app}__{suffix}"), suffix, app))
    return found


def _exists(path: str) -> bool:
    """Whether a Delta table is at ``path`` (on a local warehouse, without opening it)."""
    log = delta_log.local_log(path)
    return log.is_dir() if log is not None else delta_commits.table_exists(path)


def views_named(warehouse: Warehouse, query: str) -> set[str]:
    """The names of the warehouse's views that ``query`` names (as whole words, in any
    case)."""
    names = [v.name for v in list_views(warehouse)]
    return {n for n in names if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", query, re.IGNORECASE)}


def apps_named(warehouse: Warehouse, query: str) -> list[str]:
    """The apps whose store views ``query`` names."""
    text = query.lower()
    return [
        app
        for app in warehouse.list_apps()
        if re.search(rf"\b{re.escape(view_name(app).lower())}__\w", text)
    ]


__all__ = [
    "View",
    "ViewInfo",
    "apps_named",
    "format_time",
    "list_views",
    "pinned_app",
    "state_sql",
    "store_types",
    "typed_column",
    "view_name",
    "views",
    "views_named",
]
