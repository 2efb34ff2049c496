"""``lakestate demo --app clicks`` run again goes on after the clicks already in its topic: the
newest timestamp there, read without a JVM (``demo._newest_timestamp``)."""

from __future__ import annotations

from lakestate.cli.demo import _newest_timestamp
from lakestate.io import topics
from lakestate.warehouse import Warehouse


def test_newest_timestamp_is_the_max_over_every_partition(tmp_path) -> None:
    topic = topics.topic(Warehouse(str(tmp_path)), "clicks")
    topic.create(2)
    topic.append(
        [
            {"key": "a", "value": "1", "timestamp": 5_000, "partition": 0},
            {"key": "b", "value": "1", "timestamp": 99_000, "partition": 1},
            {"key": "c", "value": "1", "timestamp": 7_000, "partition": 0},
        ]
    )
    assert _newest_timestamp(topic) == 99_000
    topic.append([{"key": "d", "value": "1", "timestamp": 120_000, "partition": 0}])
    assert _newest_timestamp(topic) == 120_000
