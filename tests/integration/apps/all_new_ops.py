"""Test app: the newer operators in one topology, for one kill chain per transport
(test_new_operators_exactly_once.py).

- A stream-stream outer join of clicks and views (50 ms apart, 20 ms of grace), into a
  Processor-API processor with its own store "seen" (the key's joined records since the
  last punctuation) and a stream-time punctuator (every 100 ms: the key's count, then
  cleared), to "out".
- A cogroup of clicks and views per user into one activity string (store "activity").
- A foreign-key left join (KIP-213) of orders (each names its user) on that activity
  table, to "enriched"."""

from datetime import timedelta

import lakestate as ls


class Seen(ls.Processor):
    def init(self, context: ls.ProcessorContext) -> None:
        self.context = context
        self.seen = context.get_state_store("seen")
        context.schedule(timedelta(milliseconds=100), ls.PunctuationType.STREAM_TIME, self.flush)

    def process(self, record: ls.Record) -> None:
        count = (self.seen.get(record.key) or 0) + 1
        self.seen.put(record.key, count)
        self.context.forward(record.with_value(f"{record.value}#{count}"))

    def flush(self, stream_time: int) -> None:
        for key, count in list(self.seen.all()):
            self.context.forward(ls.Record(key, f"{count} by {stream_time}", stream_time))
            self.seen.delete(key)


b = ls.StreamsBuilder()
b.add_state_store(ls.Stores.key_value_store_builder(ls.Stores.persistent_key_value_store("seen")))
clicks = b.stream("clicks")
views = b.stream("views")
windows = ls.JoinWindows.of_time_difference_and_grace(
    timedelta(milliseconds=50), timedelta(milliseconds=20)
)
(
    clicks.outer_join(views, lambda c, v: f"{c}/{v}", windows, ls.StreamJoined.as_("pairs"))
    .process(Seen, "seen")
    .to("out")
)
activity = (
    clicks.group_by_key()
    .cogroup(lambda k, v, agg: f"{agg}c{v}")
    .cogroup(views.group_by_key(), lambda k, v, agg: f"{agg}v{v}")
    .aggregate(lambda: "", ls.Materialized.as_("activity"))
)
(
    b.table("orders", ls.Materialized.as_("orders"))
    .left_join(
        activity,
        lambda order: order.get("user"),
        lambda order, seen: f"{order['item']} after {seen}",
    )
    .to_stream()
    .to("enriched")
)
app = ls.App("all_new_ops", b.build(), {})
