"""Test app: flat_map (an event becomes a record per tag: its user, and its key when the
amount is over 1; user u0's tag is null), split by amount, the branches changed and merged
back, written to "routed", then counted per tag after the key change (a repartition topic)."""

import lakestate as ls


def tags(key, value):
    if value["amount"] == 0:
        return []
    user = None if value["user"] == "u0" else value["user"]
    pairs = [(user, value["amount"]), (key, value["amount"])]
    return pairs[: 1 + (value["amount"] > 1)]


b = ls.StreamsBuilder()
branches = (
    b.stream("events")
    .flat_map(tags)
    .split(ls.Named.as_("amount-"))
    .branch(lambda k, v: v >= 5, ls.Branched.as_("big"))
    .branch(lambda k, v: v == 1, ls.Branched.as_("one"))
    .default_branch()
)
merged = (
    branches["amount-big"]
    .map_values(lambda v: v * 10)
    .merge(branches["amount-one"])
    .merge(branches["amount-0"].flat_map_values(lambda v: [v, -v]))
)
merged.to("routed")
merged.group_by_key().count(ls.Materialized.as_("per-tag")).to_stream().to("per-tag-out")
app = ls.App("branching", b.build(), {})
