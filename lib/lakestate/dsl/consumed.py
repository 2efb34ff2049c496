"""``Consumed``, ``Produced`` and ``Grouped``: the serdes of a source, sink or repartition
topic (Kafka's names)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lakestate.dsl.branched import check_name
from lakestate.dsl.repartitioned import ClassOrInstance
from lakestate.errors import SerializationException, TopologyException
from lakestate.serdes import DEFAULT_SERDES, JSON, Serde, TopicSerdes, check_serde


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
    Serdes.Long())``. None for a serde: not given, so ``to()`` takes the stream's serde
    (else Json), as Kafka's; a serde given, ``Serdes.Json()`` too, is the topic's."""

    key_serde: Serde | None = None
    value_serde: Serde | None = None

    @staticmethod
    def with_(key_serde: Serde | None = None, value_serde: Serde | None = None) -> Produced:
        return Produced(
            _given(key_serde, "Produced.with_ key_serde"),
            _given(value_serde, "Produced.with_ value_serde"),
        )

    @ClassOrInstance
    def with_key_serde(self, key_serde: Serde | None) -> Produced:
        """Also on the class (Kafka's ``Produced.keySerde``): the value serde not given."""
        return replace(self, key_serde=_given(key_serde, "Produced.with_key_serde key_serde"))

    @ClassOrInstance
    def with_value_serde(self, value_serde: Serde | None) -> Produced:
        """Also on the class (Kafka's ``Produced.valueSerde``): the key serde not given."""
        what = "Produced.with_value_serde value_serde"
        return replace(self, value_serde=_given(value_serde, what))

    @property
    def serdes(self) -> TopicSerdes:
        """The sink's serdes, Json where none is given."""
        return TopicSerdes(self.key_serde or JSON, self.value_serde or JSON)


def _given(serde: Any, what: str) -> Serde | None:
    """``serde`` checked, None kept (not given); a TopologyException naming ``what``."""
    if serde is None:
        return None
    try:
        return check_serde(serde, what)
    except SerializationException as exc:
        raise TopologyException(str(exc)) from None


def _serde(serde: Any, where: str) -> Serde | None:
    """``serde`` checked (None stays None: not given, so Kafka's default applies)."""
    if serde is None:
        return None
    return _serdes(serde, None, where).key


@dataclass(frozen=True)
class Grouped:
    """How ``group_by``/``group_by_key`` repartition: the repartition topic's name
    (``<name>-repartition``, else one named after the store) and serdes. As in Kafka, the
    aggregation's store takes the key serde (and a reduce's the value serde) unless its
    ``Materialized`` gives one. ``Grouped.with_(Serdes.String(), Serdes.Long())``,
    ``Grouped.with_("by-user", Serdes.String(), Serdes.Long())``, ``Grouped.as_("by-user")``;
    None for a serde: not given (Json, unless a store default applies)."""

    name: str | None = None
    key_serde: Serde | None = None
    value_serde: Serde | None = None

    @staticmethod
    def as_(name: str) -> Grouped:
        return Grouped(check_name(name, "Grouped.as_"))

    @ClassOrInstance
    def with_(self, *args: Any) -> Grouped:
        """``with_(key_serde, value_serde)`` or ``with_(name, key_serde, value_serde)``; on
        an instance, what is not given is kept (``Grouped.as_("g").with_(k, v)``)."""
        if len(args) == 3:
            return self.with_name(args[0]).with_key_serde(args[1]).with_value_serde(args[2])
        if len(args) != 2:
            raise TopologyException(
                "Grouped.with_ takes (key_serde, value_serde) or (name, key_serde, value_serde)"
            )
        return self.with_key_serde(args[0]).with_value_serde(args[1])

    @ClassOrInstance
    def with_name(self, name: str) -> Grouped:
        return replace(self, name=check_name(name, "Grouped.with_name"))

    @ClassOrInstance
    def with_key_serde(self, key_serde: Serde | None) -> Grouped:
        return replace(self, key_serde=_serde(key_serde, "Grouped key_serde"))

    @ClassOrInstance
    def with_value_serde(self, value_serde: Serde | None) -> Grouped:
        return replace(self, value_serde=_serde(value_serde, "Grouped value_serde"))

    @property
    def serdes(self) -> TopicSerdes:
        """The repartition topic's serdes (Json where not given)."""
        return _serdes(self.key_serde, self.value_serde, "Grouped")


def grouped_of(grouped: Any, operator: str) -> Grouped:
    """``grouped`` (None: the defaults) checked to be a Grouped."""
    if grouped is None:
        return Grouped()
    if not isinstance(grouped, Grouped):
        raise TopologyException(f"{operator} takes a Grouped, got {grouped!r}")
    return grouped


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
