"""An app: a named topology with its config, defined by a module in jobs/."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from lakestate.errors import StreamsException
from lakestate.topology.graph import Topology

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class App:
    """``App(name, topology, config)``. The name is the application id: it prefixes
    repartition topics and names the app's folder of state tables in the warehouse."""

    name: str
    topology: Topology
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise StreamsException(
                f"app name {self.name!r} must start with a letter and hold only letters, "
                "digits, '_' and '-'"
            )
        if not isinstance(self.topology, Topology):
            raise StreamsException(
                f"app {self.name!r}: topology must be a built Topology (StreamsBuilder.build()), "
                f"got {type(self.topology).__name__}"
            )

    @property
    def application_id(self) -> str:
        return self.name


def load_module(path: str | Path) -> ModuleType:
    """Imports the app module at ``path`` (e.g. jobs/demo.py)."""
    path = Path(path)
    if not path.is_file():
        raise StreamsException(f"no app module at {path}")
    spec = importlib.util.spec_from_file_location(f"lakestate_job_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: An environment variable holding Kafka client settings (a JSON object, e.g. an Airflow
#: Kafka connection's extra) that override the app's config: ``bootstrap.servers`` and the
#: client settings beside it. An environment variable, not an option: they may hold secrets.
KAFKA_CONFIG_ENV = "LAKESTATE_KAFKA_CONFIG"


def load_app(path: str | Path) -> App:
    """The ``app`` defined by the module at ``path``, its config overridden by the Kafka
    client settings in env ``LAKESTATE_KAFKA_CONFIG`` when set."""
    app = getattr(load_module(path), "app", None)
    if not isinstance(app, App):
        raise StreamsException(f"{path} must define `app = lakestate.App(name, topology, config)`")
    kafka = kafka_config_from_env()
    return replace(app, config={**app.config, **kafka}) if kafka else app


def kafka_config_from_env() -> dict[str, str]:
    """The Kafka client settings of env ``LAKESTATE_KAFKA_CONFIG`` (none when unset)."""
    text = os.environ.get(KAFKA_CONFIG_ENV, "").strip()
    if not text:
        return {}
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise StreamsException(f"{KAFKA_CONFIG_ENV} is not JSON ({exc}): give an object") from None
    if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
        raise StreamsException(
            f"{KAFKA_CONFIG_ENV} must be a JSON object of Kafka client settings, e.g. "
            '{"bootstrap.servers": "host:9092"}'
        )
    return {k: str(v) for k, v in settings.items()}
