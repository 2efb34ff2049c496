"""Deleting the local stores an instance no longer needs (Kafka's
``StateDirectory.cleanRemovedTasks``): a task's store, or a warmup's half-built shadow,
once the latest generation gives this instance no role for the task (active, warmup or
standby) for ``state.cleanup.delay.ms``.

Kafka goes by the directory's last-modified time; a store here is not touched while it is
idle, so the first run that finds a store without a role writes ``released_at`` into it,
a run that finds the role back removes it, and the first run at least the delay after it
deletes the directory. A task that comes back later is restored from its changelog, as
on a new instance. Runs at the end of an instance's run, under its lock.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from lakestate.checkpoint.task_dir import TaskDir
from lakestate.restore import warmup
from lakestate.task_id import TaskId

#: The file, inside a task's directory or its shadow, holding when the instance lost the task.
RELEASED_FILE = "released_at"


def clean_up(
    state_dir: str,
    app: str,
    tasks: Iterable[TaskId],
    keep: set[TaskId],
    delay_ms: int,
    now_ms: int,
    say: Callable[[str], None],
) -> list[TaskId]:
    """Among ``tasks``, the directories (stores and shadows) of those not in ``keep``: mark
    them released at ``now_ms``, or delete those released ``delay_ms`` ago or earlier;
    unmark those in ``keep``. Returns the tasks whose directories it deleted."""
    deleted: list[Path] = []
    tasks_deleted: list[TaskId] = []
    for task in tasks:
        for folder in (TaskDir(state_dir, app, task).path, warmup.shadow_dir(state_dir, app, task)):
            if not folder.is_dir():
                continue
            marker = folder / RELEASED_FILE
            if task in keep:
                marker.unlink(missing_ok=True)
            elif not marker.exists():
                marker.write_text(str(now_ms))
            elif now_ms - _released_at(marker, now_ms) >= delay_ms:
                shutil.rmtree(folder)
                deleted.append(folder)
                if task not in tasks_deleted:
                    tasks_deleted.append(task)
    if deleted:
        say(
            f"deleted {len(deleted)} local store(s) of tasks this instance has had no role "
            f"for since {delay_ms} ms (state.cleanup.delay.ms): "
            + ", ".join(f.name for f in deleted)
        )
    return tasks_deleted


def _released_at(marker: Path, now_ms: int) -> int:
    try:
        return int(marker.read_text())
    except ValueError:  # a torn write: counted from now
        marker.write_text(str(now_ms))
        return now_ms


__all__ = ["RELEASED_FILE", "clean_up"]
