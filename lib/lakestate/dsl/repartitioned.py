"""``Repartitioned``: how ``KStream.repartition`` names and sizes its topic (Kafka's)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lakestate.dsl.branched import check_name
from lakestate.errors import TopologyException


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


@dataclass(frozen=True)
class Repartitioned:
    """``repartition()``'s topic: ``<name>-repartition`` (``as_(name)`` / ``with_name``;
    else ``KSTREAM-REPARTITION-<n>-repartition``), with ``number_of_partitions`` partitions
    (else as many as the tasks writing it). Serdes and partitioners are Kafka's only: keys
    and values are JSON here, and a key's partition is murmur2 of its JSON text."""

    name: str | None = None
    number_of_partitions: int | None = None

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
