"""An app's history as a rewind reads it (ops/rewind.py): its progress rows, each task's
*line* (the batches its state comes from, after earlier rewinds) and the *points* of the
history, the progress table's commits, newest first, with where each task stood there."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from lakestate.checkpoint.progress import TaskProgress
from lakestate.checkpoint.standing import is_complete
from lakestate.errors import StreamsException
from lakestate.io import delta_commits, delta_log, txn_ids
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = ["AppHistory", "RewindRefused"]


class RewindRefused(StreamsException):
    """The rewind cannot be done as asked; nothing was changed."""


class AppHistory:
    """An app's progress rows and the order of its points (from the progress table's log)."""

    def __init__(
        self, warehouse: Warehouse, app: str, rows: dict[tuple[TaskId, int], TaskProgress]
    ):
        self.warehouse = warehouse
        self.app = app
        self.rows = rows
        by_task: dict[TaskId, list[int]] = {}
        for task, batch in rows:
            by_task.setdefault(task, []).append(batch)
        # Off the line: batches strictly inside a rewind's (target, rewind batch).
        gaps = {
            task: [
                (r.rewound_to["batch"], r.batch_id)
                for (t, _), r in rows.items()
                if t == task and r.is_rewind
            ]
            for task in by_task
        }
        self.line: dict[TaskId, list[int]] = {}
        opened: dict[str, object] = {}
        for task, batches in by_task.items():
            line = sorted(b for b in batches if not any(lo < b < hi for lo, hi in gaps[task]))
            # An incomplete last batch (a crash mid-commit) is superseded, not replayed.
            if line and not is_complete(warehouse, app, rows[(task, line[-1])], opened):
                line.pop()
            self.line[task] = line
        self._on_line = {(t, b) for t, line in self.line.items() for b in line}

    @staticmethod
    def read(warehouse: Warehouse, app: str) -> AppHistory:
        path = warehouse.progress_path(app)
        if not delta_commits.table_exists(path):
            return AppHistory(warehouse, app, {})
        data = delta_commits.open_table(path).to_pyarrow_table()
        rows = {}
        for raw in data.to_pylist():
            row = TaskProgress.from_row(raw)
            rows[(row.task, row.batch_id)] = row
        return AppHistory(warehouse, app, rows)

    def row(self, task: TaskId, batch: int) -> TaskProgress | None:
        return self.rows.get((task, batch)) if batch else None

    def head(self) -> dict[TaskId, int]:
        """Each task's last batch on the line (0: none)."""
        return {t: (line[-1] if line else 0) for t, line in self.line.items()}

    def last_batch(self, task: TaskId) -> int:
        """The task's highest batch id anywhere (on the line or not)."""
        return max(b for t, b in self.rows if t == task)

    def canon(self, task: TaskId, batch: int) -> int:
        """The batch whose state ``batch`` of ``task`` is (a rewind row's: its target's)."""
        row = self.row(task, batch)
        while row is not None and row.is_rewind:
            batch = row.rewound_to["batch"]
            row = self.row(task, batch)
        return batch

    def points(
        self, holds: Callable[[dict[TaskId, int]], bool]
    ) -> Iterator[tuple[int, dict[TaskId, int]]]:
        """The points at which ``holds(state)`` (newest first; it holds at every point before
        one where it holds): (progress version, each task's batch there). Walks the
        progress table's commits back from its newest; the last is the beginning (every
        task at 0). RewindRefused when the log needed was cleaned up."""
        prefix = txn_ids.batch_prefix(self.app)
        path = self.warehouse.progress_path(self.app)
        stacks = {t: list(line) for t, line in self.line.items()}
        versions = delta_log.commit_versions(path)
        found = False
        first = None
        for index, version in enumerate(versions):
            commit = delta_log.commit_of(path, version)
            expected = versions[0] - index
            if commit is None or version != expected:
                raise RewindRefused(
                    f"{path}: the log of version {expected} is gone (Delta log cleanup), so "
                    "the app's history before it cannot be rewound to"
                )
            pairs = [
                (TaskId.parse(app_id[len(prefix) :]), batch)
                for app_id, batch in commit.txns
                if app_id.startswith(prefix)
            ]
            pairs = [(t, b) for t, b in pairs if (t, b) in self._on_line]
            if not pairs:
                continue
            state = {t: (s[-1] if s else 0) for t, s in stacks.items()}
            if found or holds(state):
                found = True
                yield version, state
            for task, batch in pairs:
                if not stacks[task] or stacks[task][-1] != batch:
                    raise StreamsException(
                        f"{path}: version {version} commits batch {batch} of task {task} out "
                        "of order; the app's history cannot be read"
                    )
                stacks[task].pop()
            first = version
        if any(stacks.values()):
            raise RewindRefused(f"{path}: the log does not hold every batch of the app's line")
        if first is not None:
            yield first - 1, dict.fromkeys(stacks, 0)
