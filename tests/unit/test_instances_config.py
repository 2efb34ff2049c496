"""An app's instances from its config (scaleout/instances.py): defaults, state dirs, and a
clear error naming app, instance and key for each kind of bad entry."""

from __future__ import annotations

from pathlib import Path

import lakestate as ls
import pytest
from lakestate.errors import StreamsException
from lakestate.scaleout import instances
from lakestate.scaleout.instances import Instance, instance_of, instances_of


def _app(config: dict) -> ls.App:
    b = ls.StreamsBuilder()
    b.stream("events").to("out")
    return ls.App("shop", b.build(), config)


def test_no_instances_key_is_one_default_instance_with_today_s_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKESTATE_STATE_DIR", str(tmp_path / "st"))
    assert instances_of(_app({})) == [Instance("default", "default", str(tmp_path / "st"))]
    assert instance_of(_app({}), None).name == "default"
    assert instance_of(_app({}), "default").state_dir == str(tmp_path / "st")


def test_configured_instances_defaults_and_state_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKESTATE_STATE_DIR", str(tmp_path / "root"))
    app = _app(
        {
            "lakestate.instances": [
                {"name": "a"},
                {
                    "name": "b-2",
                    "queue": "big",
                    "state_dir": str(tmp_path / "own"),
                    "master": "spark://h:7077",
                    "capacity": 3,
                },
            ]
        }
    )
    a, b = instances_of(app)
    assert a == Instance("a", "a", str(tmp_path / "root" / "a"), None, 1)
    assert b == Instance("b-2", "big", str(tmp_path / "own"), "spark://h:7077", 3)
    assert instance_of(app, None) == a and instance_of(app, "b-2") == b
    assert b.to_json() == {"name": "b-2", "queue": "big", "capacity": 3}
    # A relative state_dir is made absolute (against the working directory).
    monkeypatch.chdir(tmp_path)
    rel = _app({"lakestate.instances": [{"name": "a", "state_dir": "here"}]})
    assert instances_of(rel)[0].state_dir == str(Path(tmp_path, "here").resolve())


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ([], ["'lakestate.instances'", "non-empty list"]),
        ("a,b", ["'lakestate.instances'", "non-empty list"]),
        (["a"], ["entry 0", "dict"]),
        ([{"queue": "q"}], ["entry 0", "'name'"]),
        ([{"name": "has space"}], ["entry 0", "'name'", "'has space'"]),
        ([{"name": "a"}, {"name": "a"}], ["instance 'a'", "named twice"]),
        ([{"name": "a", "cores": 2}], ["instance 'a'", "unknown key 'cores'"]),
        ([{"name": "a", "capacity": 0}], ["instance 'a'", "'capacity'", ">= 1"]),
        ([{"name": "a", "capacity": "2"}], ["instance 'a'", "'capacity'"]),
        ([{"name": "a", "capacity": True}], ["instance 'a'", "'capacity'"]),
        ([{"name": "a", "queue": ""}], ["instance 'a'", "'queue'"]),
        ([{"name": "a", "master": 7}], ["instance 'a'", "'master'"]),
        ([{"name": "a", "state_dir": ""}], ["instance 'a'", "'state_dir'"]),
    ],
)
def test_bad_instances_config_names_app_instance_and_key(entries, named):
    with pytest.raises(StreamsException) as err:
        instances_of(_app({"lakestate.instances": entries}))
    message = str(err.value)
    assert message.startswith("app shop: config 'lakestate.instances'")
    for part in named:
        assert part in message


def test_unknown_instance_lists_the_configured_ones():
    app = _app({"lakestate.instances": [{"name": "a"}, {"name": "b"}]})
    with pytest.raises(StreamsException, match="app shop has no instance 'c'; its instances: a, b"):
        instance_of(app, "c")
    with pytest.raises(StreamsException, match="its instances: default \\(no 'lakestate.instances'"):
        instance_of(_app({}), "a")


def test_rebalance_keys_defaults_and_errors():
    assert instances.probing_rebalance_interval_ms(_app({})) == 600_000
    assert instances.warmup_max_records(_app({})) == 200_000
    app = _app({"probing.rebalance.interval.ms": 60_000, "lakestate.warmup.max.records": "500"})
    assert instances.probing_rebalance_interval_ms(app) == 60_000
    assert instances.warmup_max_records(app) == 500
    with pytest.raises(StreamsException, match="app shop: config 'probing.rebalance.interval.ms' must be an integer >= 0, got -1"):
        instances.probing_rebalance_interval_ms(_app({"probing.rebalance.interval.ms": -1}))
    with pytest.raises(StreamsException, match="app shop: config 'lakestate.warmup.max.records' must be an integer >= 0, got 'x'"):
        instances.warmup_max_records(_app({"lakestate.warmup.max.records": "x"}))
