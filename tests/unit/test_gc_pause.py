"""The cyclic garbage collector is paused while a batch is processed, and only then."""

from __future__ import annotations

import gc

import lakestate as ls
from lakestate.processors.gc_pause import cyclic_gc_paused
from lakestate.testing import TestRecord, TopologyTestDriver


def test_paused_inside_restored_after() -> None:
    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds it
    assert gc.isenabled()


def test_restored_when_the_block_raises() -> None:
    try:
        with cyclic_gc_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()


def test_a_collector_paused_by_someone_else_stays_paused() -> None:
    gc.disable()
    try:
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_driver_processes_a_record_list_with_the_collector_paused() -> None:
    seen: list[bool] = []
    builder = ls.StreamsBuilder()
    builder.stream("in").peek(lambda k, v: seen.append(gc.isenabled())).to("out")
    with TopologyTestDriver(builder.build(), {"application.id": "gc"}) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_record_list([TestRecord("k", i, i) for i in range(3)])
        assert seen == [False] * 3
        assert gc.isenabled()
        topic.pipe_input("k", 3, 3)  # one record: nothing to gain, collector as it was
        assert seen[-1] is True
        assert [r.value for r in driver.create_output_topic("out").read_records_to_list()] == [
            0,
            1,
            2,
            3,
        ]


APP = """
import gc
import lakestate as ls

def note(key, value):
    with open(__file__ + ".seen", "a") as f:
        f.write("on" if gc.isenabled() else "off")
        f.write(" ")

b = ls.StreamsBuilder()
b.stream("in").peek(note).to("out")
app = ls.App("gc-app", b.build(), {})
"""


def test_the_engine_processes_a_task_with_the_collector_paused(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    from lakestate.runtime import task_executor
    from lakestate.state.base import isolation_for

    path = tmp_path / "gc_app.py"
    path.write_text(APP)
    ctx = task_executor.BatchContext(
        str(path),
        "gc-app",
        {"0_0": 1},
        str(tmp_path / "state"),
        isolation_for({}),
        {"out": 1},
        {"0_0": {"in": 0}},
    )
    rows = pa.table(
        {
            "sub": pa.array([0, 0], pa.int32()),
            "task": pa.array([0, 0], pa.int32()),
            "input_index": pa.array([0, 0], pa.int32()),
            "topic": ["in", "in"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([0, 1], pa.int64()),
            "timestamp": pa.array([5, 6], pa.int64()),
            "key": ['"k"', '"k"'],
            "value": ["1", "2"],
            "headers": pa.array([None, None], pa.string()),
        }
    )
    out = task_executor.process_task(rows, ctx)
    assert (tmp_path / "gc_app.py.seen").read_text().split() == ["off", "off"]
    assert gc.isenabled()
    assert out.filter(pc.equal(out.column("kind"), "out")).column("value").to_pylist() == [
        "1",
        "2",
    ]
