"""Foreign-key table joins (KIP-213), as Kafka Streams computes them.

``this.join(other, foreign_key_extractor, joiner)``: each row of ``this`` subscribes to the
row of ``other`` whose key its value names. Four nodes, two topics (dsl/fk_join.py wires
them):

1. ``SubscriptionSend`` (this table's changes): per change, a subscription keyed by the
   foreign key, carrying the primary key, an instruction and a hash of the new value; a
   changed foreign key first unsubscribes from the old one. It goes through the
   subscription topic to the partition of the foreign key.
2. ``SubscriptionReceive`` (other table's side): keeps each (foreign key, primary key)
   subscription in the subscription store, looks the foreign row up, and answers on the
   response topic, keyed by the primary key, as the instruction says.
3. ``ForeignTableJoin`` (other table's changes): answers every subscriber of the changed
   foreign row (a prefix scan of the subscription store).
4. ``ResponseJoin`` (back on this table's side): drops an answer whose hash is not that of
   the row's current value (the row changed since it subscribed: a newer answer is on its
   way), else emits ``joiner(value, foreign_value)``, or a tombstone where an inner join
   (or a deleted row) has no result. A changed or deleted foreign key thus retracts the old
   result, and out-of-order answers are dropped (counted in ``dropped-records``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakestate.processors.api import Processor
from lakestate.processors.join import table_row
from lakestate.processors.metrics import DROPPED_RECORDS
from lakestate.records import Change, Record
from lakestate.serdes import JSON, JsonSerde, Serde
from lakestate.state.keys import encode_key
from lakestate.state.serde import json_text

# Kafka's SubscriptionWrapper.Instruction
DELETE_KEY_AND_PROPAGATE = "delete_key_and_propagate"
DELETE_KEY_NO_PROPAGATE = "delete_key_no_propagate"
PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = "propagate_null_if_no_fk_val_available"
PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = "propagate_only_if_fk_val_available"
_INSTRUCTIONS = (
    DELETE_KEY_AND_PROPAGATE,
    DELETE_KEY_NO_PROPAGATE,
    PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE,
    PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE,
)


def value_hash(value: Any, serde: Serde = JSON) -> str | None:
    """The hash a subscription carries of its row's value (None for none): 128 bits of
    the value serialized by its table's value serde ``serde``, as Kafka hashes the
    serialized value (Murmur3 128); a Json value by its canonical JSON (sorted keys: the
    bytes its topic holds), so equal values hash alike whatever their dicts' key order."""
    if value is None:
        return None
    data = json_text(value).encode() if type(serde) is JsonSerde else serde.serialize(value)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _held(value: Any, serde: Serde) -> Any:
    """A value (a foreign value, a primary key) as an internal topic's JSON value carries
    it: its JSON form by its table's serde (a Bytes one as base64 text)."""
    return value if value is None or not serde.json_form_differs else serde.to_json(value)


def _given(held: Any, serde: Serde) -> Any:
    """The value a ``_held`` form stands for."""
    return held if held is None or not serde.json_form_differs else serde.from_json(held)


@dataclass(frozen=True)
class Subscription:
    """What a row of this table sends its foreign key's partition."""

    value_hash: str | None
    instruction: str
    primary_key: Any

    def encode(self, key_serde: Serde = JSON) -> list:
        """Its form on the subscription topic: the primary key in the JSON form of this
        table's key serde ``key_serde`` (a Bytes key as base64 text, as Kafka's
        SubscriptionWrapper carries it serialized by that serde)."""
        instruction = _INSTRUCTIONS.index(self.instruction)
        return [self.value_hash, instruction, _held(self.primary_key, key_serde)]

    @staticmethod
    def decode(raw: list, key_serde: Serde = JSON) -> Subscription:
        return Subscription(raw[0], _INSTRUCTIONS[raw[1]], _given(raw[2], key_serde))


@dataclass(frozen=True)
class SubscriptionResponse:
    """The foreign row's value (None: none) for the subscription of the row whose value
    hashed to ``value_hash``."""

    value_hash: str | None
    foreign_value: Any

    def encode(self) -> list:
        """Its form on the response topic."""
        return [self.value_hash, self.foreign_value]

    @staticmethod
    def decode(raw: list) -> SubscriptionResponse:
        return SubscriptionResponse(raw[0], raw[1])


class SubscriptionSend(Processor):
    """This table's changes as subscriptions (Kafka 4.4's SubscriptionSendProcessorSupplier).
    A row whose foreign key changed unsubscribes from the old one first. A left join sends
    every row, one without a foreign key keyed None (answered with no foreign value); an
    inner join skips a row whose new foreign key is None (counted as dropped), retracting
    its old result, and for a row keeping its foreign key answers only when the foreign
    row exists."""

    def __init__(
        self,
        extractor: Callable[[Any], Any],
        left: bool,
        versioned: bool,
        value_serde: Serde = JSON,
    ) -> None:
        self.extractor = extractor
        self.left = left
        self.versioned = versioned
        self.value_serde = value_serde  # this table's: what the value hash is taken of

    def process(self, record: Record) -> None:
        change: Change = record.value
        if self.versioned and not change.is_latest:
            self.context.metric(DROPPED_RECORDS)  # KIP-914: an older version changes nothing
            return
        new, old = change.new_value, change.old_value
        if new is None and old is None:
            return
        old_fk = None if old is None else self.extractor(old)
        new_fk = None if new is None else self.extractor(new)
        sends: list[tuple[Any, str]] = []
        changed = old_fk is not None and _key_bytes(new_fk) != _key_bytes(old_fk)
        if self.left:
            if changed:
                sends.append((old_fk, DELETE_KEY_NO_PROPAGATE))
            sends.append((new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
        elif new is None:
            if old_fk is not None:
                sends.append((old_fk, DELETE_KEY_AND_PROPAGATE))
        elif new_fk is None:
            self.context.metric(DROPPED_RECORDS)
            if old_fk is not None:
                sends.append((old_fk, DELETE_KEY_AND_PROPAGATE))
        elif changed:
            sends.append((old_fk, DELETE_KEY_NO_PROPAGATE))
            # A new foreign key without a row must still retract the old result.
            sends.append((new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
        else:
            sends.append((new_fk, PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE))
        new_hash = value_hash(new, self.value_serde)
        for fk, instruction in sends:
            subscription = Subscription(new_hash, instruction, record.key)
            self.context.forward(Record(fk, subscription, record.timestamp, record.headers))


def _key_bytes(key: Any) -> bytes | None:
    """A foreign key as compared (Kafka compares serialized keys: 1 and 1.0 differ)."""
    return None if key is None else encode_key(key)


class SubscriptionReceive(Processor):
    """Keeps the subscriptions (store key ``(foreign_key, primary_key)``, value the hash)
    and answers each from the foreign table's store (Kafka's SubscriptionReceive- and
    SubscriptionJoinProcessorSupplier): the answer's timestamp is the later of the
    subscription's and the foreign row's."""

    def __init__(self, subscriptions: str, foreign_store: str, foreign_serde: Serde = JSON) -> None:
        self.subscriptions_name = subscriptions
        self.foreign_store_name = foreign_store
        self.foreign_serde = foreign_serde  # the foreign table's value serde

    def init(self, context) -> None:
        super().init(context)
        self.subscriptions = context.get_state_store(self.subscriptions_name)
        self.foreign = context.get_state_store(self.foreign_store_name)

    def process(self, record: Record) -> None:
        fk, subscription = record.key, record.value
        instruction = subscription.instruction
        if fk is None and instruction != PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
            self.context.metric(DROPPED_RECORDS)
            return
        if fk is not None:
            key = (fk, subscription.primary_key)
            if instruction in (DELETE_KEY_AND_PROPAGATE, DELETE_KEY_NO_PROPAGATE):
                self.subscriptions.delete(key)
            else:
                self.subscriptions.put(key, subscription.value_hash, record.timestamp)
        if instruction == DELETE_KEY_NO_PROPAGATE:
            return
        found = None if fk is None else table_row(self.foreign, fk)
        if found is None and instruction == PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE:
            return
        timestamp = record.timestamp if found is None else max(record.timestamp, found[1])
        foreign_value = None
        if found is not None and instruction != DELETE_KEY_AND_PROPAGATE:
            foreign_value = _held(found[0], self.foreign_serde)
        response = SubscriptionResponse(subscription.value_hash, foreign_value)
        self.context.forward(Record(subscription.primary_key, response, timestamp))


class ForeignTableJoin(Processor):
    """A change of the foreign table answers every row subscribed to its key (Kafka's
    ForeignTableJoinProcessorSupplier), in primary-key order, at the change's time."""

    def __init__(self, subscriptions: str, versioned: bool, foreign_serde: Serde = JSON) -> None:
        self.subscriptions_name = subscriptions
        self.versioned = versioned
        self.foreign_serde = foreign_serde  # the foreign table's value serde

    def init(self, context) -> None:
        super().init(context)
        self.subscriptions = context.get_state_store(self.subscriptions_name)

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.metric(DROPPED_RECORDS)
            return
        change: Change = record.value
        if self.versioned and not change.is_latest:
            self.context.metric(DROPPED_RECORDS)
            return
        foreign_value = _held(change.new_value, self.foreign_serde)
        for (_, primary_key), found in self.subscriptions.prefix_scan((record.key,)):
            response = SubscriptionResponse(found.value, foreign_value)
            self.context.forward(Record(primary_key, response, record.timestamp, record.headers))


class ResponseJoin(Processor):
    """Resolves an answer against this table's current row (Kafka's
    ResponseJoinProcessorSupplier): a stale one (its hash is not the row's) is dropped."""

    def __init__(
        self,
        store: str,
        joiner: Callable[[Any, Any], Any],
        left: bool,
        value_serde: Serde = JSON,
        foreign_serde: Serde = JSON,
    ) -> None:
        self.store_name = store
        self.joiner = joiner
        self.left = left
        self.value_serde = value_serde  # this table's (as SubscriptionSend's)
        self.foreign_serde = foreign_serde  # the foreign table's (its responses' values)

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        response: SubscriptionResponse = record.value
        row = table_row(self.store, record.key)
        current = None if row is None else row[0]
        if response.value_hash != value_hash(current, self.value_serde):
            self.context.metric(DROPPED_RECORDS)
            return
        if response.foreign_value is None and (not self.left or current is None):
            result = None
        else:
            result = self.joiner(current, _given(response.foreign_value, self.foreign_serde))
        self.context.forward(record.with_value(result))
