"""An app: a named topology with its config, defined by a module in jobs/."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
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


def load_app(path: str | Path) -> App:
    """The ``app`` defined by the module at ``path``."""
    app = getattr(load_module(path), "app", None)
    if not isinstance(app, App):
        raise StreamsException(f"{path} must define `app = lakestate.App(name, topology, config)`")
    return app
