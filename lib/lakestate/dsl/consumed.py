"""``Consumed`` and ``Produced``: the serdes of a source or sink topic (Kafka's names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakestate.errors import SerializationException, TopologyException
from lakestate.serdes import DEFAULT_SERDES, Serde, TopicSerdes, check_serde


def _serdes(key_serde: Any, value_serde: Any, where: str) -> TopicSerdes:
    try:
        return TopicSerdes(
            check_serde(key_serde, f"{where} key_serde"),
            check_serde(value_serde, f"{where} value_serde"),
        )
    except SerializationException as exc:
        raise TopologyException(str(exc)) from None


@dataclass(frozen=True)
class Consumed:
    """How a source topic's records are read: ``Consumed.with_(Serdes.Long(),
    Serdes.String())``. None for a serde: the default, ``Serdes.Json()``."""

    serdes: TopicSerdes = DEFAULT_SERDES

    @staticmethod
    def with_(key_serde: Serde | None = None, value_serde: Serde | None = None) -> Consumed:
        return Consumed(_serdes(key_serde, value_serde, "Consumed.with_"))

    def with_key_serde(self, key_serde: Serde | None) -> Consumed:
        return Consumed(_serdes(key_serde, self.serdes.value, "Consumed.with_key_serde"))

    def with_value_serde(self, value_serde: Serde | None) -> Consumed:
        return Consumed(_serdes(self.serdes.key, value_serde, "Consumed.with_value_serde"))


@dataclass(frozen=True)
class Produced:
    """How a sink topic's records are written: ``Produced.with_(Serdes.String(),
    Serdes.Long())``. None for a serde: the default, ``Serdes.Json()``."""

    serdes: TopicSerdes = DEFAULT_SERDES

    @staticmethod
    def with_(key_serde: Serde | None = None, value_serde: Serde | None = None) -> Produced:
        return Produced(_serdes(key_serde, value_serde, "Produced.with_"))

    def with_key_serde(self, key_serde: Serde | None) -> Produced:
        return Produced(_serdes(key_serde, self.serdes.value, "Produced.with_key_serde"))

    def with_value_serde(self, value_serde: Serde | None) -> Produced:
        return Produced(_serdes(self.serdes.key, value_serde, "Produced.with_value_serde"))


def serdes_of(config: Any, kind: type, node: str) -> TopicSerdes:
    """The serdes of ``config`` (a ``Consumed`` or ``Produced``, per ``kind``; None: the
    default), or a TopologyException naming the node."""
    if config is None:
        return DEFAULT_SERDES
    if not isinstance(config, kind):
        raise TopologyException(
            f"node {node}: expected a {kind.__name__} (e.g. {kind.__name__}.with_("
            f"Serdes.Long(), Serdes.String())), got {config!r}"
        )
    return config.serdes
