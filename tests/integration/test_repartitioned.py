"""``KStream.repartition(Repartitioned...with_number_of_partitions(n))`` in the engine: the
topic is created with n partitions (so the sub-topology reading it has n tasks), `describe`
says so before the first run, the counts equal the test driver's, and a later run that asks
for another count is refused before anything is committed. In process: no JVM."""

from __future__ import annotations

import pytest
from engine_helpers import APPS, events
from lakestate import run_app
from lakestate.app import load_app
from lakestate.errors import StreamsException
from lakestate.io import delta_commits
from lakestate.io import topics as io_topics
from lakestate.io.topic_records import decode_json
from lakestate.read.describe import describe_app
from lakestate.testing import TopologyTestDriver

pytestmark = pytest.mark.integration

APP = APPS / "repartitioned.py"


def _run(warehouse, tmp_path) -> None:
    run_app(
        str(APP),
        warehouse=warehouse.root,
        state_dir=str(tmp_path / "state"),
        until_caught_up=True,
        inprocess_max_records=10**9,
        say=lambda _: None,
    )


def test_a_repartition_topic_gets_the_partitions_repartitioned_asks_for(
    warehouse, tmp_path, monkeypatch
):
    records = events(60, seed=8)
    io_topics.topic(warehouse, "events").create(2)
    io_topics.topic(warehouse, "events").append(records)
    app = load_app(APP)
    described = describe_app(warehouse, app)
    assert [s["tasks"] for s in described["subtopologies"]] == [2, 3]

    _run(warehouse, tmp_path)
    topic = "repartitioned-by-user-repartition"
    assert io_topics.topic(warehouse, topic).partitions() == 3
    assert io_topics.topic(warehouse, "per-user-out").partitions() == 3
    with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
        source = d.create_input_topic("events")
        for r in records:
            source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        expected = dict(d.get_key_value_store("per-user").all())
    got = {}
    for table in io_topics.topic(warehouse, "per-user-out").read_partitions():
        for r in table.to_pylist():  # a key's records in one partition: the last is latest
            got[decode_json(r["key"])] = decode_json(r["value"])
    assert got == expected and len(got) > 3

    progress = delta_commits.open_table(warehouse.progress_path(app.name)).version()
    monkeypatch.setenv("REPARTITIONED_PARTITIONS", "4")
    with pytest.raises(
        StreamsException, match=f"{topic}' has 3 partitions, but Repartitioned sets 4"
    ):
        _run(warehouse, tmp_path)
    assert delta_commits.open_table(warehouse.progress_path(app.name)).version() == progress
