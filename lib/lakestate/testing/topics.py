"""The TopologyTestDriver's input and output topics (Kafka's ``TestInputTopic`` and
``TestOutputTopic``) and the records read from them."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakestate.errors import StreamsException

if TYPE_CHECKING:
    from lakestate.testing.driver import TopologyTestDriver


@dataclass(frozen=True)
class TestRecord:
    """A record read from an output topic."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: int
    headers: dict[str, Any] | None = None


class TestInputTopic:
    __test__ = False

    def __init__(self, driver: TopologyTestDriver, topic: str) -> None:
        self._driver = driver
        self.topic = topic
        serdes = driver.topology.serdes_of(topic)
        # As Kafka's TestInputTopic serializes and the source deserializes: a key or value
        # its serde cannot hold fails here, and the app sees what the bytes give back.
        self._serdes = None if serdes.is_json else serdes

    def _through_bytes(self, key: Any, value: Any) -> tuple[Any, Any]:
        serdes = self._serdes
        if serdes is None:
            return key, value
        return (
            serdes.key.deserialize(serdes.key.serialize(key)),
            serdes.value.deserialize(serdes.value.serialize(value)),
        )

    def pipe_input(
        self,
        key: Any = None,
        value: Any = None,
        timestamp: int | datetime | None = None,
        headers: dict[str, Any] | None = None,
    ) -> None:
        """Process one record now. Without a timestamp, the topic's clock is used. A topic
        read with serdes (``Consumed``) takes its key and value through their bytes."""
        key, value = self._through_bytes(key, value)
        self._driver._pipe(self.topic, key, value, timestamp, headers)

    def pipe_key_value_list(
        self, pairs: Iterable[tuple[Any, Any]], timestamp: int | None = None, advance_ms: int = 0
    ) -> None:
        """``pipe_input`` of each pair; timestamps from ``timestamp`` on, ``advance_ms``
        apart (without one, the topic's clock)."""
        items = []
        ts = timestamp
        for key, value in pairs:
            items.append((*self._through_bytes(key, value), ts, None))
            if ts is not None:
                ts += advance_ms
        self._driver._pipe_many(self.topic, items)

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        """``pipe_input`` of each value with a null key."""
        self._driver._pipe_many(
            self.topic, [(*self._through_bytes(None, value), None, None) for value in values]
        )

    def pipe_record_list(self, records: Iterable[TestRecord]) -> None:
        """``pipe_input`` of each record, in order: the same outputs, state and metrics as
        piping them one by one (a record that fails raises, the ones before it processed)."""
        self._driver._pipe_many(
            self.topic,
            [(*self._through_bytes(r.key, r.value), r.timestamp, r.headers) for r in records],
        )


class TestOutputTopic:
    __test__ = False

    def __init__(self, driver: TopologyTestDriver, topic: str) -> None:
        self._driver = driver
        self.topic = topic

    def _queue(self) -> deque[TestRecord]:
        queue = self._driver._outputs.get(self.topic)
        if queue is None:
            queue = self._driver._outputs[self.topic] = deque()
        return queue

    def read_record(self) -> TestRecord:
        queue = self._queue()
        if not queue:
            raise StreamsException(f"output topic {self.topic!r} is empty")
        return queue.popleft()

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        record = self.read_record()
        return record.key, record.value

    def read_records_to_list(self) -> list[TestRecord]:
        queue = self._driver._outputs.get(self.topic)
        if not queue:
            return []
        records = list(queue)
        queue.clear()
        return records

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        return dict(self.read_key_values_to_list())

    def get_queue_size(self) -> int:
        return len(self._queue())

    def is_empty(self) -> bool:
        return not self._queue()
