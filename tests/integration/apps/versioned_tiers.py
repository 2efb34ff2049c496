"""Test app: customer tiers as a versioned table (KIP-914), so SQL can ask for a value as of
a time; out-of-order tier updates go into the history. ``tier-changes`` gets every update
the table forwards; ``tier-counts`` counts customers per tier, out-of-order updates not
counted (they are not the latest)."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
tiers = b.table("tier-updates", ls.Materialized.as_versioned("tiers", timedelta(hours=1)))
tiers.to_stream().to("tier-changes")
tiers.group_by(lambda customer, tier: (tier, customer)).count(
    ls.Materialized.as_("per-tier")
).to_stream().to("tier-counts")
app = ls.App("tiers", b.build(), {})
