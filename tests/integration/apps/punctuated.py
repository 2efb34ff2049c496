"""Test app: the Processor API with a punctuator. A per-key running total of the events'
amounts in a key-value store "totals", forwarded on each event; every 100 ms of stream
time a punctuator forwards each key's total (at that stream time) and clears the store."""

from datetime import timedelta

import lakestate as ls


class Totals(ls.Processor):
    def init(self, context: ls.ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("totals")
        context.schedule(timedelta(milliseconds=100), ls.PunctuationType.STREAM_TIME, self.flush)

    def process(self, record: ls.Record) -> None:
        total = (self.store.get(record.key) or 0) + record.value["amount"]
        self.store.put(record.key, total)
        self.context.forward(record.with_value({"running": total}))

    def flush(self, stream_time: int) -> None:
        for key, total in list(self.store.all()):
            self.context.forward(ls.Record(key, {"total": total, "at": stream_time}, stream_time))
            self.store.delete(key)


b = ls.StreamsBuilder()
b.add_state_store(ls.Stores.key_value_store_builder(ls.Stores.persistent_key_value_store("totals")))
b.stream("events").process(Totals, "totals").to("totals-out")
app = ls.App("punctuated", b.build(), {})
