"""Test app: each record puts a version of its key into a versioned store (a stand-in for
the versioned table source the DSL will have), so SQL can ask for values as of a time."""

from datetime import timedelta

import lakestate as ls
from lakestate.processors.api import Processor
from lakestate.topology.graph import StoreSpec


class PutVersions(Processor):
    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store("tiers")

    def process(self, record) -> None:
        self.store.put(record.key, record.value, record.timestamp)


b = ls.StreamsBuilder()
b.stream("tier-updates")
graph = b._graph  # no DSL for versioned tables yet: wire the store and processor directly
source = next(iter(graph.nodes))
tiers = ls.Materialized.as_versioned("tiers", timedelta(hours=1))
graph.add_store(StoreSpec("tiers", "versioned", tiers.store_options()), "PUT-VERSIONS")
graph.add_processor("PUT-VERSIONS", source, PutVersions, ["tiers"])
app = ls.App("tiers", b.build(), {})
