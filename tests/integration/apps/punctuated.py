"""Test app: the Processor API with a punctuator. A per-key running total of the events'
amounts in a key-value store "totals", forwarded on each event; every 100 ms of stream
time a punctuator forwards each key's total (at that stream time) with the key's lifetime
count of events (store "lifetime", never cleared) and clears "totals"."""

from datetime import timedelta

import lakestate as ls


class Totals(ls.Processor):
    def init(self, context: ls.ProcessorContext) -> None:
        self.context = context
        self.totals = context.get_state_store("totals")
        self.lifetime = context.get_state_store("lifetime")
        context.schedule(timedelta(milliseconds=100), ls.PunctuationType.STREAM_TIME, self.flush)

    def process(self, record: ls.Record) -> None:
        total = (self.totals.get(record.key) or 0) + record.value["amount"]
        self.totals.put(record.key, total)
        self.lifetime.put(record.key, (self.lifetime.get(record.key) or 0) + 1)
        self.context.forward(record.with_value({"running": total}))

    def flush(self, stream_time: int) -> None:
        for key, total in list(self.totals.all()):
            value = {"total": total, "events": self.lifetime.get(key), "at": stream_time}
            self.context.forward(ls.Record(key, value, stream_time))
            self.totals.delete(key)


b = ls.StreamsBuilder()
for store in ("totals", "lifetime"):
    b.add_state_store(
        ls.Stores.key_value_store_builder(ls.Stores.persistent_key_value_store(store))
    )
b.stream("events").process(Totals, "totals", "lifetime").to("totals-out")
app = ls.App("punctuated", b.build(), {})
