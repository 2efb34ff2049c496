"""``Joined``: the serdes and name of a stream-table join (Kafka's
``KStream.join/leftJoin(KTable, ValueJoiner, Joined)``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from lakestate.dsl.branched import check_name
from lakestate.dsl.repartitioned import ClassOrInstance, optional_serde
from lakestate.errors import TopologyException
from lakestate.serdes import Serde


@dataclass(frozen=True)
class Joined:
    """A stream-table join's serdes and name, as Kafka's. When the stream's key changed
    upstream (select_key, map, ...), the join reads it through a repartition topic with
    ``key_serde`` (not given: the stream's known key serde, which a key change clears, so
    the default, Json) and ``value_serde`` (not given: the stream's); an app on Kafka
    partitions that topic by the key serde's bytes, so a String-keyed Kafka table needs
    ``Joined.with_(Serdes.String(), ...)`` for the re-keyed records to meet its rows.
    ``name`` (``as_`` / ``with_name``) names the join's processor and that topic
    (``<name>-repartition``, read by ``<name>-repartition-source``); not given:
    ``KSTREAM-JOIN-<n>`` / ``KSTREAM-LEFTJOIN-<n>``. The joined stream keeps the key serde.
    ``other_value_serde`` (the table's values) is carried for Kafka's API; the table's
    own serdes read its rows. None: not given.

    ``with_grace_period`` (KIP-923: buffer stream records for a versioned table's late
    updates) is not supported: a join given one fails at build with a TopologyException."""

    key_serde: Serde | None = None
    value_serde: Serde | None = None
    other_value_serde: Serde | None = None
    name: str | None = None
    grace_period: timedelta | None = None

    @staticmethod
    def as_(name: str) -> Joined:
        """A Joined naming the join (and its repartition topic) ``name``."""
        return Joined(name=check_name(name, "Joined.as_"))

    @ClassOrInstance
    def with_(
        self,
        key_serde: Serde | None,
        value_serde: Serde | None,
        other_value_serde: Serde | None,
        name: str | None = None,
    ) -> Joined:
        """The join's serdes (Kafka's ``Joined.with``), and its name if given."""
        joined = (
            self.with_key_serde(key_serde)
            .with_value_serde(value_serde)
            .with_other_value_serde(other_value_serde)
        )
        return joined if name is None else joined.with_name(name)

    @ClassOrInstance
    def with_name(self, name: str) -> Joined:
        """Names the join's processor and its repartition topic (``<name>-repartition``)."""
        return replace(self, name=check_name(name, "Joined.with_name"))

    @ClassOrInstance
    def with_key_serde(self, key_serde: Serde | None) -> Joined:
        """The key serde (the repartition topic's, and the joined stream's)."""
        return replace(self, key_serde=optional_serde(key_serde, "Joined key_serde"))

    @ClassOrInstance
    def with_value_serde(self, value_serde: Serde | None) -> Joined:
        """The stream's value serde (the repartition topic's)."""
        return replace(self, value_serde=optional_serde(value_serde, "Joined value_serde"))

    @ClassOrInstance
    def with_other_value_serde(self, other_value_serde: Serde | None) -> Joined:
        """The table's value serde."""
        serde = optional_serde(other_value_serde, "Joined other_value_serde")
        return replace(self, other_value_serde=serde)

    @ClassOrInstance
    def with_grace_period(self, grace_period: timedelta) -> Joined:
        """KIP-923's grace period: kept here, refused when the join is built."""
        if not isinstance(grace_period, timedelta) or grace_period < timedelta(0):
            raise TopologyException(
                f"Joined.with_grace_period takes a non-negative timedelta, got {grace_period!r}"
            )
        return replace(self, grace_period=grace_period)


def joined_of(joined: Any, where: str) -> Joined:
    """``joined`` checked (None: Kafka's ``Joined.with(null, null, null)``); a
    TopologyException naming ``where`` otherwise, and for a grace period (KIP-923)."""
    if joined is None:
        return Joined()
    if not isinstance(joined, Joined):
        raise TopologyException(f"node {where}: a join with a table takes a Joined, got {joined!r}")
    if joined.grace_period is not None:
        raise TopologyException(
            f"node {where}: Joined.with_grace_period (KIP-923: a stream-table join that "
            "buffers records for a versioned table's late updates) is not supported by "
            "lakestate; drop the grace period (the join then reads the table as each record "
            "arrives, as Kafka's join without one)"
        )
    return joined
