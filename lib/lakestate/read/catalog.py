"""The warehouse's views by name, for people looking for one: ``SHOW TABLES`` / ``SHOW
VIEWS`` (answered from the warehouse's listing, as Spark answers them for temporary views,
by either engine), ``lakestate sql --list``, and the error for a name that is no view.

The engines register only the views a query names (``views.views_named``): registering
every view would pin every app and open every table. So a listing cannot come from the
engine's catalog; it comes from ``views.list_views``, which opens no table.
"""

from __future__ import annotations

import difflib
import os
import re

from lakestate.read.result import Result
from lakestate.read.views import list_views
from lakestate.warehouse import Warehouse

__all__ = ["listing", "show_tables", "spelled_as_tables", "unknown_view"]

# Spark's SHOW TABLES / SHOW VIEWS: [IN|FROM namespace] [[LIKE] 'pattern'].
_SHOW = re.compile(
    r"^\s*SHOW\s+(TABLES|VIEWS)(?:\s+(?:IN|FROM)\s+[\w.`]+)?(?:\s+(?:LIKE\s+)?'([^']*)')?\s*;?\s*$",
    re.IGNORECASE,
)
#: How many names an error lists before "and N more".
_LISTED = 30


def listing(warehouse: Warehouse) -> Result:
    """``lakestate sql --list``: every view, with its kind and what it shows; ValueError
    when there is none (the wrong warehouse?)."""
    found = list_views(warehouse)
    if not found:
        raise ValueError(f"no views: {_empty(warehouse)}")
    return Result(["view", "kind", "of"], [(v.name, v.kind, v.of) for v in found])


def _empty(warehouse: Warehouse) -> str:
    """What to say of a warehouse without a view."""
    root = warehouse.root.removeprefix("file://")
    found = not warehouse.is_local or os.path.isdir(root)  # a bucket's: checked at the start
    there = "has no topics and no apps" if found else "does not exist"
    return (
        f"the warehouse at {warehouse.root} {there} (is it the one you meant? Point at yours "
        "with --warehouse DIR or LAKESTATE_WAREHOUSE; the default is ./warehouse)"
    )


def show_tables(warehouse: Warehouse, query: str) -> Result | None:
    """The result of ``query`` when it is Spark's ``SHOW TABLES`` or ``SHOW VIEWS`` (else
    None): every view of the warehouse whose name matches the pattern (Spark's: ``*`` any
    characters, ``|`` between alternatives, any case, the rest a regular expression), as
    Spark lists temporary views:
    ``namespace`` (empty), ``tableName`` (``viewName``), ``isTemporary`` (true)."""
    found = _SHOW.match(query)
    if found is None:
        return None
    what, pattern = found.group(1).upper(), found.group(2)
    names = sorted(v.name for v in list_views(warehouse))
    if pattern is not None:
        names = [n for n in names if any(_like(a, n) for a in pattern.split("|"))]
    column = "tableName" if what == "TABLES" else "viewName"
    return Result(["namespace", column, "isTemporary"], [("", n, True) for n in names])


def _like(pattern: str, name: str) -> bool:
    """Spark's SHOW ... LIKE for one alternative: a regular expression in which ``*``
    stands for ``.*``, matched whole, in any case (an invalid one matches nothing)."""
    try:
        return re.fullmatch(pattern.strip().replace("*", ".*"), name, re.IGNORECASE) is not None
    except re.error:
        return False


def unknown_view(warehouse: Warehouse, name: str) -> str:
    """What to say when a query names ``name``, which is no view: the views of the app the
    name starts with (``<app>__``), else all of the warehouse's, and the nearest name."""
    known = list_views(warehouse)
    if not known:
        return f"no view named {name}: {_empty(warehouse)}"
    app = name.lower().split("__")[0] if "__" in name else None
    mine = [v for v in known if app is not None and v.name.lower().startswith(app + "__")]
    listed = mine or known
    nearest = difflib.get_close_matches(name.lower(), [v.name.lower() for v in known], n=1)
    text = f"no view named {name} in warehouse {warehouse.root}"
    if nearest:
        text += f"; did you mean {next(v.name for v in known if v.name.lower() == nearest[0])}?"
    names = [v.name for v in listed]
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    text += (
        f" The views of app {app}: " if mine else " Its views: "
    ) + f"{', '.join(names[:_LISTED])}{more} (`lakestate sql --list` says what each one is)"
    return text


def spelled_as_tables(warehouse: Warehouse, query: str) -> str:
    """For a query the engine could not parse: a line naming each view the query
    names by its table's own name (topic ``event-counts`` for view ``event_counts``, store
    ``demo__event-counts-store``), else ""."""
    spellings = {}
    for view in list_views(warehouse):
        if view.kind in ("topic", "delta_sink"):
            spellings[view.of] = view.name
        elif view.kind == "state":
            spellings[view.of.replace("/", "__", 1)] = view.name
    found = [
        f"{table} is the view {name}"
        for table, name in sorted(spellings.items())
        if name != table and re.search(rf"(?<![\w-]){re.escape(table)}(?![\w-])", query)
    ]
    return f"\n{'; '.join(found)} (in view names, - and . become _)" if found else ""
