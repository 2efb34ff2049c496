"""The app's line after rewinds (ops/rewind_history.py): which batches a task's state comes from."""

from __future__ import annotations

from lakestate.checkpoint.progress import TaskProgress
from lakestate.ops.rewind_history import AppHistory
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

T = TaskId(0, 0)


def _row(batch: int, rewound_to: int | None = None) -> TaskProgress:
    return TaskProgress(
        T,
        batch,
        "run",
        0,
        {},
        {"events": batch * 10},
        batch,
        0,
        rewound_to=None if rewound_to is None else {"batch": rewound_to, "progress_version": 0},
    )


def _history(tmp_path, rows: list[TaskProgress]) -> AppHistory:
    return AppHistory(Warehouse(tmp_path), "app", {(r.task, r.batch_id): r for r in rows})


def test_batches_undone_by_a_rewind_are_off_the_line(tmp_path):
    # 1..5, rewound to 3 as batch 6, then 7; then rewound to 1 as batch 8.
    rows = [_row(b) for b in (1, 2, 3, 4, 5)] + [_row(6, 3), _row(7), _row(8, 1)]
    history = _history(tmp_path, rows)
    assert history.line[T] == [1, 8]
    assert history.head() == {T: 8}
    assert history.canon(T, 8) == 1
    assert history.last_batch(T) == 8
    # Before the second rewind the line was 1, 2, 3, 6, 7.
    history = _history(tmp_path, rows[:-1])
    assert history.line[T] == [1, 2, 3, 6, 7]
    assert history.canon(T, 6) == 3 and history.canon(T, 7) == 7


def test_a_rewind_of_a_rewind_row_resolves_to_the_first_target(tmp_path):
    rows = [_row(1), _row(2), _row(3, 1), _row(4, 3)]
    history = _history(tmp_path, rows)
    assert history.line[T] == [1, 3, 4]
    assert history.canon(T, 4) == 1
    # Rewound to before the first batch: no state.
    history = _history(tmp_path, [_row(1), _row(2, 0)])
    assert history.line[T] == [2] and history.canon(T, 2) == 0
