"""State owned by Spark's executors: where a task's store lives when the driver's disk is
not the executor's (a Spark cluster), and how the executor brings it to the task's
committed batch before processing (docs/architecture.md, "State on executors").

The driver then never opens a local store: it reads where each task stands from the
progress table (``standing``), ships that in the batch's context (``ExecutorStores``), and
skips the commit's step 4. Each executor keeps its tasks' stores in its own state
directory (``executor_state_dir``) and, at the start of a task's batch, brings the store
to the committed batch the driver read (``restore.recovery.recover_task``): it applies the
transaction it staged for that batch if the progress row is the one it staged it for
(step 4, done late), catches up from the changelogs if it is behind (the task ran
elsewhere meanwhile), or restores from them if it has no store. So a task that moves
between executors restores or catches up, and one that stays costs nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lakestate.app import App
from lakestate.checkpoint.batch import TaskCheckpoint
from lakestate.checkpoint.layout import AppLayout
from lakestate.checkpoint.task_dir import STATE_DIR_ENV
from lakestate.restore.recovery import recover_task
from lakestate.state.base import IsolationLevel
from lakestate.task_id import TaskId

#: the app config key: ``driver`` (stores in the driver's state directory, opened by the
#: Python workers of local Spark), ``executors``, or ``auto`` (the default: ``executors``,
#: but ``driver`` for an app with global tables on a local master)
STATE_OWNER = "lakestate.spark.state.owner"
OWNERS = ("auto", "driver", "executors")


def state_owner(config: dict, master: str, global_tables: bool = False) -> str:
    """``driver`` or ``executors``: the app's ``lakestate.spark.state.owner``; ``auto`` is
    ``executors`` on any master (each task reads its own input and writes its own files
    where it runs: no Spark scan, shuffle or rows through the driver), except for an app
    with ``global_tables`` on a local master (Spark's resolved ``master`` is ``local`` or
    ``local[...]``), whose Python workers share the driver's disk: its global tables need
    the driver's stores (on a cluster such an app is refused by the runner)."""
    owner = str(config.get(STATE_OWNER, "auto"))
    if owner not in OWNERS:
        raise ValueError(f"app config {STATE_OWNER} is {owner!r}: use one of {', '.join(OWNERS)}")
    if owner != "auto":
        return owner
    local = master == "local" or master.startswith("local[")
    return "driver" if local and global_tables else "executors"


def executor_state_dir(warehouse_root: str) -> str:
    """An executor's state directory for the apps of the warehouse at ``warehouse_root``:
    under env ``LAKESTATE_STATE_DIR`` (set on each Spark worker, it is inherited by its
    executors), else under ``lakestate-state`` in the machine's temporary directory (stable
    across Spark applications, unlike an executor's work directory), a directory named for
    the warehouse, so that two warehouses' apps of one name never share a store."""
    base = os.environ.get(STATE_DIR_ENV) or str(Path(tempfile.gettempdir()) / "lakestate-state")
    digest = hashlib.sha256(warehouse_root.encode()).hexdigest()[:16]
    return str(Path(base).resolve() / f"warehouse-{digest}")


@dataclass(frozen=True)
class ExecutorStores:
    """What a batch's executors need to bring their tasks' stores to where the tasks
    stand: the app's layout without its App (``layout_facts``: the App is loaded in the
    executor, its functions need not pickle), each task's committed batch (by task id), and
    the batch of its latest rewind row."""

    layout_facts: AppLayout
    committed: dict[str, TaskCheckpoint]
    rewound: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        layout: AppLayout,
        committed: dict[TaskId, TaskCheckpoint],
        rewound: dict[TaskId, int],
    ) -> ExecutorStores:
        facts = dataclasses.replace(layout, app=None, cluster=None)  # type: ignore[arg-type]
        return cls(
            facts,
            {str(t): c for t, c in committed.items()},
            {str(t): b for t, b in rewound.items()},
        )

    def bring(self, app: App, task: TaskId, isolation: IsolationLevel) -> str:
        """Bring ``task``'s store in this executor's state directory to its committed batch;
        returns the state directory."""
        state_dir = executor_state_dir(self.layout_facts.warehouse.root)
        layout = dataclasses.replace(self.layout_facts, app=app)
        key = str(task)
        recover_task(
            layout,
            task,
            self.committed.get(key, TaskCheckpoint()),
            state_dir,
            isolation,
            _say,
            self.rewound.get(key, 0),
        )
        return state_dir


def _say(line: str) -> None:
    # An executor has no terminal: its lines go to its log (stderr, the executor's log).
    logging.getLogger("lakestate.executor").info(line)


__all__ = ["OWNERS", "STATE_OWNER", "ExecutorStores", "executor_state_dir", "state_owner"]
