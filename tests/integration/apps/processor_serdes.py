"""Test app: the Processor API with stores given serdes (issue 26 item 3), as a Kafka user
builds them. Per event (String key, Json value ``{"amount": n}``) the processor counts
the key in "counts" (String keys, Long values), appends the amount's low byte to the key's
last 4 bytes in "tails" (Bytes keys: the key's UTF-8 and 0xff, Bytes values), and counts
the key in its 100 ms window in "windows" (String keys, Long values); it forwards the
count."""

from datetime import timedelta

import lakestate as ls

S, L, B = ls.Serdes.String(), ls.Serdes.Long(), ls.Serdes.Bytes()


class Tally(ls.Processor):
    def init(self, context: ls.ProcessorContext) -> None:
        self.context = context
        self.counts = context.get_state_store("counts")
        self.tails = context.get_state_store("tails")
        self.windows = context.get_state_store("windows")

    def process(self, record: ls.Record) -> None:
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        raw = record.key.encode() + b"\xff"  # not UTF-8: only a Bytes store holds it as is
        low = bytes([record.value["amount"] % 256])
        self.tails.put(raw, ((self.tails.get(raw) or b"") + low)[-4:])  # a str would fail
        start = record.timestamp - record.timestamp % 100
        window = ls.Window(start, start + 100)
        in_window = (self.windows.get(record.key, window) or 0) + 1
        self.windows.put(record.key, window, in_window, record.timestamp)
        self.context.forward(record.with_value(count))


b = ls.StreamsBuilder()
St = ls.Stores
b.add_state_store(St.key_value_store_builder(St.persistent_key_value_store("counts"), S, L))
b.add_state_store(St.key_value_store_builder(St.in_memory_key_value_store("tails"), B, B))
hour = timedelta(hours=1)
windows = St.persistent_window_store("windows", hour, timedelta(milliseconds=100), False)
b.add_state_store(St.window_store_builder(windows, S, L))
b.stream("events").process(Tally, "counts", "tails", "windows").to("counted")
app = ls.App("processor_serdes", b.build(), {})
