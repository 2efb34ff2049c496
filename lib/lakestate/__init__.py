"""lakestate: Kafka Streams' stateful semantics on a lakehouse.

Build a topology with the DSL (``StreamsBuilder``), test it with
``lakestate.testing.TopologyTestDriver``, run it as Spark micro-batches with state in Delta.
"""

from lakestate.app import App
from lakestate.dsl.builder import StreamsBuilder
from lakestate.dsl.deduplicated import Deduplicated
from lakestate.dsl.grouped import KGroupedStream, KGroupedTable
from lakestate.dsl.kstream import KStream
from lakestate.dsl.ktable import GlobalKTable, KTable
from lakestate.dsl.materialized import Materialized
from lakestate.dsl.stream_joins import JoinWindows, StreamJoined
from lakestate.dsl.suppressed import BufferConfig, Suppressed
from lakestate.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream
from lakestate.dsl.windows import SessionWindows, TimeWindows
from lakestate.errors import (
    InvalidStateStoreException,
    ProcessingException,
    SerializationException,
    StreamsException,
    TopologyException,
)
from lakestate.records import Change, Record, Window, Windowed
from lakestate.state.constants import PUT_RETURN_CODE_NOT_PUT
from lakestate.state.versioned import VersionedKeyValueStore, VersionedRecord
from lakestate.topology.graph import Topology

__all__ = [
    "App",
    "BufferConfig",
    "PUT_RETURN_CODE_NOT_PUT",
    "Change",
    "Deduplicated",
    "GlobalKTable",
    "InvalidStateStoreException",
    "JoinWindows",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "ProcessingException",
    "Record",
    "SerializationException",
    "SessionWindowedKStream",
    "SessionWindows",
    "StreamJoined",
    "StreamsBuilder",
    "StreamsException",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
    "Topology",
    "TopologyException",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "Window",
    "Windowed",
]
