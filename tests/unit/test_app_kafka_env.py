"""LAKESTATE_KAFKA_CONFIG: Kafka client settings (an Airflow Kafka connection's extra) over
an app's config, or an error naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from lakestate.app import KAFKA_CONFIG_ENV, load_app
from lakestate.errors import StreamsException

DEMO = Path(__file__).resolve().parents[2] / "jobs" / "demo.py"


def test_unset_or_empty_leaves_the_config(monkeypatch):
    monkeypatch.delenv(KAFKA_CONFIG_ENV, raising=False)
    config = load_app(DEMO).config
    monkeypatch.setenv(KAFKA_CONFIG_ENV, " ")
    assert load_app(DEMO).config == config and "bootstrap.servers" not in config


def test_the_settings_override_and_add(monkeypatch):
    monkeypatch.setenv(KAFKA_CONFIG_ENV, '{"bootstrap.servers": "b:9092", "linger.ms": 5}')
    config = load_app(DEMO).config
    assert config["bootstrap.servers"] == "b:9092" and config["linger.ms"] == "5"
    monkeypatch.delenv(KAFKA_CONFIG_ENV)
    assert "bootstrap.servers" not in load_app(DEMO).config  # the module's app is untouched


@pytest.mark.parametrize(
    ("text", "said"),
    [("bootstrap.servers=b:9092", "is not JSON"), ('["b:9092"]', "must be a JSON object")],
)
def test_anything_but_an_object_is_refused_by_name(monkeypatch, text, said):
    monkeypatch.setenv(KAFKA_CONFIG_ENV, text)
    with pytest.raises(StreamsException, match=f"{KAFKA_CONFIG_ENV} {said}"):
        load_app(DEMO)
