"""``Repartitioned``: how ``KStream.repartition`` names and sizes its topic (Kafka's)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lakestate.dsl.branched import check_name
from lakestate.errors import SerializationException, TopologyException
from lakestate.serdes import Serde, check_serde


class ClassOrInstance:
    """A builder method callable on the class (starting from the defaults) or on an
    instance: ``Repartitioned.with_number_of_partitions(4).with_name("by-user")``."""

    def __init__(self, method: Any) -> None:
        self.method = method
        self.__doc__ = method.__doc__

    def __get__(self, instance: Any, owner: type) -> Any:
        target = owner() if instance is None else instance
        return self.method.__get__(target, owner)


def _check_partitions(n: Any) -> int:
    if type(n) is not int or n < 1:
        raise TopologyException(
            f"Repartitioned: the number of partitions must be an int of at least 1, got {n!r}"
        )
    return n


def optional_serde(serde: Any, where: str) -> Serde | None:
    """``serde`` checked to be a Serde (None stays None: not given, a default applies);
    a TopologyException otherwise."""
    if serde is None:
        return None
    try:
        return check_serde(serde, where)
    except SerializationException as exc:
        raise TopologyException(str(exc)) from None


@dataclass(frozen=True)
class Repartitioned:
    """``repartition()``'s topic: ``<name>-repartition`` (``as_(name)`` / ``with_name``;
    else ``KSTREAM-REPARTITION-<n>-repartition``), with ``number_of_partitions`` partitions
    (else as many as the tasks writing it). ``with_(key_serde, value_serde)``,
    ``with_key_serde``, ``with_value_serde``: the topic's serdes, as Kafka's: the value
    serde not given is the stream's (``Consumed``'s, carried forward), the key serde not
    given is the default (Json) for the topic and the stream's after it. Partitioners are
    Kafka's default only: murmur2 of the key's bytes under the topic's key serde in an app
    on Kafka, of its JSON text in an app on log tables (io/partitioner.py)."""

    name: str | None = None
    number_of_partitions: int | None = None
    key_serde: Serde | None = None
    value_serde: Serde | None = None

    @staticmethod
    def as_(name: str) -> Repartitioned:
        return Repartitioned(check_name(name, "Repartitioned.as_"))

    @staticmethod
    def with_defaults() -> Repartitioned:
        return Repartitioned()

    @ClassOrInstance
    def with_name(self, name: str) -> Repartitioned:
        """The topic's name is ``<name>-repartition``."""
        return replace(self, name=check_name(name, "Repartitioned.with_name"))

    @ClassOrInstance
    def with_number_of_partitions(self, number_of_partitions: int) -> Repartitioned:
        """The topic has ``number_of_partitions`` partitions (the tasks reading it as many)."""
        return replace(self, number_of_partitions=_check_partitions(number_of_partitions))

    @ClassOrInstance
    def with_(self, key_serde: Serde | None, value_serde: Serde | None) -> Repartitioned:
        """The topic's serdes (Kafka's ``Repartitioned.with(keySerde, valueSerde)``); on an
        instance the name and partitions are kept. None: not given."""
        return self.with_key_serde(key_serde).with_value_serde(value_serde)

    @ClassOrInstance
    def with_key_serde(self, key_serde: Serde | None) -> Repartitioned:
        """The topic's key serde (None: not given)."""
        return replace(self, key_serde=optional_serde(key_serde, "Repartitioned key_serde"))

    @ClassOrInstance
    def with_value_serde(self, value_serde: Serde | None) -> Repartitioned:
        """The topic's value serde (None: not given, the stream's)."""
        return replace(self, value_serde=optional_serde(value_serde, "Repartitioned value_serde"))
