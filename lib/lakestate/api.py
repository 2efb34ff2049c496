"""lakestate's public runtime API: what tests, DAGs, the Airflow plugin and scripts call.

Each name is defined in its package (``scaleout``, ``ops``, ``read``); this module only
says where, so that callers do not depend on where a concern lives. ``import lakestate``
exposes the names lazily (``lakestate.run_app``), and each is imported on first use: reading
state (``app_status``, ``sql``) never imports the runtime, and with it pyspark.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each public name and the module that defines it.
WHERE = {
    "AppStatus": "lakestate.read.status",
    "CompactionResult": "lakestate.ops.compaction",
    "RebalanceResult": "lakestate.scaleout.rebalance",
    "RewindResult": "lakestate.ops.rewind",
    "RunResult": "lakestate.runtime.runner",
    "Warehouse": "lakestate.warehouse",
    "app_status": "lakestate.read.status",
    "compact": "lakestate.ops.compaction",
    "declare_delta_source": "lakestate.io.deltasource",
    "maintain": "lakestate.ops.maintenance",
    "rebalance": "lakestate.scaleout.rebalance",
    "rewind": "lakestate.ops.rewind",
    "run_app": "lakestate.scaleout.instance_run",
    "sql": "lakestate.read.duckdb_engine",
}

__all__ = sorted(WHERE)


def __getattr__(name: str) -> Any:
    if name in WHERE:
        return getattr(importlib.import_module(WHERE[name]), name)
    raise AttributeError(f"module 'lakestate.api' has no attribute {name!r}")
