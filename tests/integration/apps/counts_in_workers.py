"""Test app: counts.py's topology and name, processed in two worker processes whatever the
batch's size; each record's processing process id is noted in the folder named by
LAKESTATE_TEST_PIDS, when set (a file per process)."""

import os
from pathlib import Path

import lakestate as ls


def _note_pid(key, value) -> None:
    folder = os.environ.get("LAKESTATE_TEST_PIDS")
    if folder:
        Path(folder, str(os.getpid())).touch()


b = ls.StreamsBuilder()
events = b.stream("events").peek(_note_pid).filter(lambda k, v: v["amount"] > 0)
events.group_by_key().count(ls.Materialized.as_("counts")).to_stream().to("counts-out")
events.group_by_key().aggregate(
    lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sums")
).to_stream().to("sums-out")
config = {
    "statestore.uncommitted.max.records": 100_000,
    "lakestate.inprocess.workers": 2,
    "lakestate.inprocess.workers.min.records": 0,
}
app = ls.App("counts", b.build(), config)
