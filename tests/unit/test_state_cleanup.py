"""Deleting local stores an instance no longer needs (scaleout/state_cleanup.py), on real
directories: released first, deleted once state.cleanup.delay.ms passed, kept while the
task has a role, shadows alike."""

from __future__ import annotations

from pathlib import Path

from lakestate.checkpoint.task_dir import TaskDir
from lakestate.restore import warmup
from lakestate.scaleout.state_cleanup import RELEASED_FILE, clean_up
from lakestate.task_id import TaskId

APP = "shop"
T0, T1, T2 = TaskId(0, 0), TaskId(0, 1), TaskId(1, 0)
DELAY = 600_000


def _store(state: Path, task: TaskId) -> Path:
    path = TaskDir(state, APP, task).path / "db"
    path.mkdir(parents=True)
    (path / "CURRENT").write_text("MANIFEST-000001\n")
    return path.parent


def _shadow(state: Path, task: TaskId) -> Path:
    path = warmup.shadow_dir(state, APP, task) / "db"
    path.mkdir(parents=True)
    return path.parent


def _clean(state: Path, keep: set[TaskId], now: int, said: list[str]) -> list[TaskId]:
    return clean_up(str(state), APP, [T0, T1, T2], keep, DELAY, now, said.append)


def test_a_store_without_a_role_is_released_then_deleted_after_the_delay(tmp_path) -> None:
    mine, lost, shadow = _store(tmp_path, T0), _store(tmp_path, T1), _shadow(tmp_path, T2)
    said: list[str] = []
    assert _clean(tmp_path, {T0}, 1_000, said) == []
    assert (lost / RELEASED_FILE).read_text() == "1000" and (shadow / RELEASED_FILE).exists()
    assert not (mine / RELEASED_FILE).exists() and said == []
    # Not yet: a millisecond short of the delay.
    assert _clean(tmp_path, {T0}, 1_000 + DELAY - 1, said) == []
    assert lost.exists() and shadow.exists()
    assert _clean(tmp_path, {T0}, 1_000 + DELAY, said) == [T1, T2]
    assert not lost.exists() and not shadow.exists() and mine.exists()
    assert said and "state.cleanup.delay.ms" in said[0] and "0_1" in said[0]


def test_a_task_that_comes_back_keeps_its_store_and_starts_over(tmp_path) -> None:
    lost = _store(tmp_path, T1)
    _clean(tmp_path, set(), 1_000, [])
    _clean(tmp_path, {T1}, 2_000, [])  # back before the delay: unmarked
    assert not (lost / RELEASED_FILE).exists()
    _clean(tmp_path, set(), 3_000, [])  # lost again: the delay counts from now
    assert _clean(tmp_path, set(), 1_000 + DELAY, []) == []
    assert _clean(tmp_path, set(), 3_000 + DELAY, []) == [T1] and not lost.exists()


def test_a_torn_marker_counts_from_now(tmp_path) -> None:
    lost = _store(tmp_path, T1)
    (lost / RELEASED_FILE).write_text("")
    assert _clean(tmp_path, set(), 5_000, []) == []
    assert (lost / RELEASED_FILE).read_text() == "5000"
