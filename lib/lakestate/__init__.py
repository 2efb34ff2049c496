"""lakestate: Kafka Streams' stateful semantics on a lakehouse.

Build a topology with the DSL (``StreamsBuilder``), test it with
``lakestate.testing.TopologyTestDriver``, run it as micro-batches with state in Delta
(``lakestate.run_app``; the runtime API is ``lakestate.api``, imported on first use).
"""

import importlib
from typing import Any

from lakestate.app import App
from lakestate.delta_sink import DeltaSink
from lakestate.delta_source import DeltaSource
from lakestate.dsl.branched import Branched, BranchedKStream, Named
from lakestate.dsl.builder import StreamsBuilder
from lakestate.dsl.cogrouped import (
    CogroupedKStream,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
)
from lakestate.dsl.consumed import Consumed, Grouped, Produced
from lakestate.dsl.deduplicated import Deduplicated
from lakestate.dsl.grouped import KGroupedStream, KGroupedTable
from lakestate.dsl.joined import Joined
from lakestate.dsl.kstream import KStream
from lakestate.dsl.ktable import GlobalKTable, KTable
from lakestate.dsl.materialized import Materialized
from lakestate.dsl.repartitioned import Repartitioned
from lakestate.dsl.stores import StoreBuilder, Stores
from lakestate.dsl.stream_joins import JoinWindows, StreamJoined
from lakestate.dsl.suppressed import BufferConfig, Suppressed
from lakestate.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream
from lakestate.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from lakestate.errors import (
    InvalidStateStoreException,
    ProcessingException,
    SerializationException,
    StreamsException,
    TopologyException,
)
from lakestate.processors.punctuation import Cancellable, PunctuationType
from lakestate.processors.user import Processor, ProcessorContext
from lakestate.records import Change, Record, Window, Windowed
from lakestate.serdes import Serde, Serdes, WindowedSerdes
from lakestate.state.constants import PUT_RETURN_CODE_NOT_PUT
from lakestate.state.versioned import VersionedKeyValueStore, VersionedRecord
from lakestate.topology.graph import Topology

__all__ = [
    "App",
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Cancellable",
    "PUT_RETURN_CODE_NOT_PUT",
    "Change",
    "CogroupedKStream",
    "Consumed",
    "Grouped",
    "Deduplicated",
    "DeltaSink",
    "DeltaSource",
    "GlobalKTable",
    "InvalidStateStoreException",
    "JoinWindows",
    "Joined",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "ProcessingException",
    "Produced",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "Repartitioned",
    "Serde",
    "Serdes",
    "SerializationException",
    "SessionWindowedCogroupedKStream",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindows",
    "StoreBuilder",
    "Stores",
    "StreamJoined",
    "StreamsBuilder",
    "StreamsException",
    "Suppressed",
    "TimeWindowedCogroupedKStream",
    "TimeWindowedKStream",
    "TimeWindows",
    "Topology",
    "TopologyException",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "Window",
    "Windowed",
    "WindowedSerdes",
]


def __getattr__(name: str) -> Any:
    # The runtime API is imported on first use: building and testing a topology (and a
    # Spark worker importing the app) needs none of it.
    if name.startswith("__"):
        raise AttributeError(name)
    api = importlib.import_module("lakestate.api")
    if name in api.WHERE:
        return getattr(api, name)
    raise AttributeError(f"module 'lakestate' has no attribute {name!r}")
