"""lakestate's public runtime API: what tests, DAGs, the Airflow plugin and scripts call.

Each name is defined in its package (``scaleout``, ``ops``, ``read``); this module only
gathers them, so that callers do not depend on where a concern lives. ``import lakestate``
exposes them lazily (``lakestate.run_app``), keeping the DSL import light.
"""

from __future__ import annotations

from lakestate.ops.compaction import CompactionResult, compact
from lakestate.ops.maintenance import maintain
from lakestate.ops.rewind import RewindResult, rewind
from lakestate.read.duckdb_engine import sql
from lakestate.read.status import AppStatus, app_status
from lakestate.runtime.runner import RunResult
from lakestate.scaleout.instance_run import run_app
from lakestate.scaleout.rebalance import RebalanceResult, rebalance
from lakestate.warehouse import Warehouse

__all__ = [
    "AppStatus",
    "CompactionResult",
    "RebalanceResult",
    "RewindResult",
    "RunResult",
    "Warehouse",
    "app_status",
    "compact",
    "maintain",
    "rebalance",
    "rewind",
    "run_app",
    "sql",
]
