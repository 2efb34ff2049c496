"""A stream-stream join's output does not depend on ``--max-records``: with both inputs
written over the same time span before the run, any cap gives what one uncapped run gives
and what the test driver gives when fed each partition's records in the order Kafka's
PartitionGroup processes them (the input whose next record has the lowest timestamp first,
ties in input order). In-process transport: the planning is the transport's concern only
through the ranges, which both transports read alike (test_stream_joins_engine runs both)."""

from __future__ import annotations

import json

import pytest
from engine_helpers import APPS
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io import topics as io_topics
from lakestate.io.partitioner import partition_for
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = APPS / "stream_joins.py"
PARTITIONS = 2
INPUTS = ("clicks", "views")
KEYS = ("u1", "u2", "u6", "u8")  # two in each partition


def _record(topic: str):
    return st.builds(
        lambda key, ts, i: {"key": key, "value": f"{topic[0]}{i}", "timestamp": ts},
        st.sampled_from(KEYS),
        st.integers(1_000, 1_400),
        st.integers(0, 99),
    )


def _merged(inputs: dict[str, list[dict]]) -> list[tuple[str, dict]]:
    """The PartitionGroup order of one partition's records."""
    pos = dict.fromkeys(INPUTS, 0)
    order = []
    while heads := [
        (inputs[t][pos[t]]["timestamp"], i, t)
        for i, t in enumerate(INPUTS)
        if pos[t] < len(inputs[t])
    ]:
        _, _, topic = min(heads)
        order.append((topic, inputs[topic][pos[topic]]))
        pos[topic] += 1
    return order


def _driver(records: dict[str, list[dict]]) -> dict[int, list[tuple]]:
    app = load_app(APP)
    outputs = {}
    for p in range(PARTITIONS):
        mine = {
            t: [r for r in rs if partition_for(r["key"], PARTITIONS) == p]
            for t, rs in records.items()
        }
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            sources = {t: d.create_input_topic(t) for t in INPUTS}
            for topic, r in _merged(mine):
                sources[topic].pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            out = d.create_output_topic("paired").read_records_to_list()
        outputs[p] = [(x.key, x.value, x.timestamp) for x in out]
    return outputs


def _engine(tmp, records: dict[str, list[dict]], max_records: int | None) -> dict[int, list[tuple]]:
    wh = Warehouse(tmp / "wh")
    for topic in INPUTS:
        io_topics.topic(wh, topic).create(PARTITIONS)
        io_topics.topic(wh, topic).append(records[topic])
    result = run_app(
        str(APP),
        warehouse=wh.root,
        state_dir=str(tmp / "state"),
        inprocess_max_records=10**9,
        max_records=max_records,
        until_caught_up=True,
        say=lambda _: None,
    )
    assert result.records == sum(map(len, records.values()))
    out = {}
    for p, table in enumerate(io_topics.topic(wh, "paired").read_partitions()):
        rows = table.to_pylist()
        out[p] = [(json.loads(r["key"]), json.loads(r["value"]), r["timestamp"]) for r in rows]
    return out


# No shrinking: each example is two engine runs (a failure prints its records as it is).
@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.fixed_dictionaries({t: st.lists(_record(t), min_size=1, max_size=14) for t in INPUTS}),
    st.integers(1, 12),
)
def test_join_output_is_the_same_for_any_max_records(tmp_path_factory, records, max_records):
    expected = _driver(records)
    capped = _engine(tmp_path_factory.mktemp("capped"), records, max_records)
    assert capped == expected
    assert _engine(tmp_path_factory.mktemp("uncapped"), records, None) == expected
