"""Test app of the scale-out test (test_scale_out.py): per-key counts (sub-topology 0) and,
re-keyed by user through a repartition topic, per-user sums (sub-topology 1); a store and a
sink in each, so every task has state to warm up.

Its ``lakestate.instances`` are read, each time the module is loaded, from the JSON file
named by env ``SCALE_OUT_INSTANCES`` (a list of instance dicts), so a test can go from two
instances to three and back between runs; without the variable the app configures none
(one implicit instance: the one-instance reference run)."""

import json
import os

import lakestate as ls

b = ls.StreamsBuilder()
events = b.stream("events")
events.group_by_key().count(ls.Materialized.as_("per-key")).to_stream().to("per-key-out")
(
    events.select_key(lambda k, v: v["user"])
    .group_by_key()
    .aggregate(lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("per-user"))
    .to_stream()
    .to("per-user-out")
)

config = {
    # In process (no Spark) whatever the pending input: the test runs many short runs.
    "lakestate.inprocess.max.records": 10**9,
    # A warmup is caught up within this many records of the committed offsets.
    "acceptable.recovery.lag": 400,
}
if os.environ.get("SCALE_OUT_INSTANCES"):
    with open(os.environ["SCALE_OUT_INSTANCES"], encoding="utf-8") as f:
        config["lakestate.instances"] = json.load(f)
app = ls.App("scale_out", b.build(), config)
