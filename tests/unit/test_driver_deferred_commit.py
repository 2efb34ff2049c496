"""The test driver's deferred commits: a one-task topology whose processing can run again
unseen commits every COMMIT_EVERY records, and nobody can tell it from a commit per record
(outputs, stores, metrics, a failing record undone alone)."""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls
import pytest
from lakestate.processors.task import Task
from lakestate.testing import driver as driver_module
from lakestate.testing.driver import TopologyTestDriver

CONTINUE = {"processing.exception.handler": "log_and_continue"}


def _checked(value: int) -> int:
    if value == 13:
        raise ValueError("13 is refused")
    return value


def _windowed_final(peek: list | None = None) -> ls.Topology:
    b = ls.StreamsBuilder()
    stream = b.stream("in").map_values(_checked)
    if peek is not None:
        stream = stream.peek(lambda k, v: peek.append(v))
    windows = ls.TimeWindows.of_size_and_grace(
        timedelta(milliseconds=10), timedelta(milliseconds=5)
    )
    (
        stream.group_by_key()
        .windowed_by(windows)
        .count(materialized=ls.Materialized.as_("counts"))
        .suppress(ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded()))
        .to_stream()
        .to("out")
    )
    return b.build()


INPUTS = [(f"k{i % 3}", 13 if i in (7, 20) else i, i * 3) for i in range(40)]


def _play(config: dict, deferred: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """Outputs after each input (errors and dead letters included), then the store and the
    metrics; ``deferred`` False: the driver's commit per record."""
    if not deferred:
        monkeypatch.setattr(Task, "replays_safely", lambda self: False)
    monkeypatch.setattr(driver_module, "COMMIT_EVERY", 8)
    seen = []
    with TopologyTestDriver(_windowed_final(), config) as driver:
        assert driver._deferred == deferred
        topic, out = driver.create_input_topic("in"), driver.create_output_topic("out")
        dead = driver.create_output_topic("test-app-dead-letters")
        for key, value, ts in INPUTS:
            try:
                topic.pipe_input(key, value, ts)
            except Exception as exc:  # noqa: BLE001 - the error is part of the outcome
                seen.append(type(exc).__name__)
            seen.append(out.read_key_values_to_list())
            seen.append(len(dead.read_records_to_list()))
        counts = list(driver.get_window_store("counts").all())
        return seen, counts, driver.metrics()


@pytest.mark.parametrize("config", [{}, CONTINUE], ids=["fail", "continue"])
def test_deferred_commits_give_what_a_commit_per_record_gives(config, monkeypatch):
    deferred = _play(config, True, monkeypatch)
    per_record = _play(config, False, monkeypatch)
    assert deferred == per_record
    seen, counts, _ = deferred
    errors = [s for s in seen if isinstance(s, str)]
    assert len(errors) == (0 if config else 3)  # 13 at inputs 7, 13 and 20
    assert sum(1 for s in seen if s == 1) == (3 if config else 0)  # dead letters
    assert sum(len(s) for s in seen if isinstance(s, list)) > 20  # final counts
    assert counts  # the windows still retained


def test_a_failing_record_is_undone_alone(monkeypatch):
    monkeypatch.setattr(driver_module, "COMMIT_EVERY", 500)
    with TopologyTestDriver(_windowed_final()) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input("a", 1, 0)
        topic.pipe_input("a", 2, 1)
        with pytest.raises(Exception, match="13 is refused"):
            topic.pipe_input("a", 13, 2)
        topic.pipe_input("a", 3, 3)
        # The two records before the failing one stay, the one after it counts too.
        assert list(driver.get_window_store("counts").fetch("a", 0, 0)) == [(0, 3)]
        assert driver.producer_offset("in") == 4


def test_store_reads_see_every_record_piped(monkeypatch):
    monkeypatch.setattr(driver_module, "COMMIT_EVERY", 500)
    with TopologyTestDriver(_windowed_final()) as driver:
        topic = driver.create_input_topic("in")
        store = driver.get_window_store("counts")
        topic.pipe_input("a", 1, 0)
        assert list(store.fetch("a", 0, 0)) == [(0, 1)]
        topic.pipe_input("a", 1, 1)
        assert list(store.fetch("a", 0, 0)) == [(0, 2)]


def test_code_with_side_effects_keeps_a_commit_per_record():
    """A peek (or any node that is not chunk-capable or a suppression) would see replayed
    records: such a topology commits each record."""
    peeked: list = []
    with TopologyTestDriver(_windowed_final(peek=peeked)) as driver:
        assert not driver._deferred
        topic = driver.create_input_topic("in")
        topic.pipe_input("a", 1, 0)
        with pytest.raises(Exception, match="13 is refused"):
            topic.pipe_input("a", 13, 1)
        topic.pipe_input("a", 2, 2)
    assert peeked == [1, 2]
