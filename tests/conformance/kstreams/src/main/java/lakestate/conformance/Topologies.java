package lakestate.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.Suppressed.BufferConfig;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The topology kinds a scenario can name, each built with Kafka's DSL from the scenario's
 * params. Every kind reads topic "in" (String keys, values by the scenario's value_serde) and
 * writes topic "out"; joins read topic "table" too. To add a kind, add a builder to {@link #KINDS} and the same kind to
 * tests/conformance/harness.py (its Python twin).
 *
 * <p>The functions are fixed so both sides compute the same thing: reduce sums longs (a null
 * as 0); aggregate starts from "0" and appends "+value" (so the output shows where the
 * initializer ran); a session merger joins two aggregates with "&amp;" (so it shows which
 * merged, in which order).
 */
final class Topologies {
    static final String INPUT_TOPIC = "in";  // every kind writes Main.OUTPUT_TOPIC

    /** A built topology and how to read its output topic. */
    record Built(Topology topology, Deserializer<Object> outKey, Deserializer<Object> outValue) {}

    interface Kind {
        Built build(JsonNode params, Serde<Object> values);
    }

    /** The extension point: topology kind -> builder. */
    static final Map<String, Kind> KINDS = Map.ofEntries(
            Map.entry("stateless", (Kind) Topologies::stateless),
            Map.entry("aggregate", (Kind) Topologies::aggregate),
            Map.entry("grouped_serdes", (Kind) Topologies::groupedSerdes),
            Map.entry("bytes_store", (Kind) Topologies::bytesStore),
            Map.entry("serde_flow", (Kind) Topologies::serdeFlow),
            Map.entry("time_windowed_aggregate", (Kind) Topologies::timeWindowedAggregate),
            Map.entry("session_windowed_aggregate", (Kind) Topologies::sessionWindowedAggregate),
            Map.entry("sliding_windowed_aggregate", (Kind) Topologies::slidingWindowedAggregate),
            Map.entry("stream_table_join", (Kind) Topologies::streamTableJoin),
            Map.entry("table_table_join", (Kind) Topologies::tableTableJoin),
            Map.entry("stream_stream_join", (Kind) Topologies::streamStreamJoin),
            Map.entry("bytes_stream_join", (Kind) Topologies::bytesStreamJoin),
            Map.entry("cogroup", (Kind) Topologies::cogroup),
            Map.entry("fk_join", (Kind) Topologies::fkJoin),
            Map.entry("bytes_fk_join", (Kind) Topologies::bytesFkJoin),
            Map.entry("processor", (Kind) Topologies::processor));

    static Built build(String kind, JsonNode params, String valueSerde) {
        Kind builder = KINDS.get(kind);
        if (builder == null) {
            throw new IllegalArgumentException("unknown topology kind " + kind + "; known: " + KINDS.keySet());
        }
        return builder.build(params, serde(valueSerde));
    }

    // -- kinds ---------------------------------------------------------------------------------

    /** groupByKey() then count / reduce / aggregate, optionally suppressed. */
    static Built aggregate(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KGroupedStream<String, Object> grouped = grouped(builder, values);
        String aggregation = params.get("aggregation").asText();
        Serde<Object> outValues = resultSerde(aggregation, values);
        KTable<String, Object> table = switch (aggregation) {
            case "count" -> cast(grouped.count(Materialized.with(Serdes.String(), Serdes.Long())));
            case "reduce" -> grouped.reduce(Topologies::sum, Materialized.with(Serdes.String(), values));
            case "aggregate" -> cast(grouped.aggregate(
                    Topologies::init, (k, v, agg) -> append(agg, v),
                    Materialized.with(Serdes.String(), Serdes.String())));
            default -> throw unknown("aggregation", aggregation);
        };
        table = suppress(table, params.get("suppress"));
        table.toStream().to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), outValues));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), outValues.deserializer());
    }

    /**
     * groupBy(key -> regrouped key, Grouped.with("regrouped", String, values)) then the
     * aggregation into the store "grouped-store", named with Materialized.as and given no key
     * serde: Kafka's defaults give it the Grouped key serde, a count Long values, a reduce the
     * Grouped value serde; an aggregate's String values are given (withValueSerde).
     */
    static Built groupedSerdes(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        // The Grouped value serde is the params' "values" (the scenario's value_serde too).
        Serde<Object> groupedValues = serde(params.get("values").asText());
        KGroupedStream<String, Object> grouped = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values))
                .groupBy((k, v) -> regroup(k), Grouped.with("regrouped", Serdes.String(), groupedValues));
        String aggregation = params.get("aggregation").asText();
        Serde<Object> outValues = resultSerde(aggregation, values);
        KTable<String, Object> table = switch (aggregation) {
            case "count" -> cast(grouped.count(
                    Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("grouped-store")));
            case "reduce" -> grouped.reduce(Topologies::sum,
                    Materialized.<String, Object, KeyValueStore<Bytes, byte[]>>as("grouped-store"));
            case "aggregate" -> cast(grouped.aggregate(
                    Topologies::init, (k, v, agg) -> append(agg, v),
                    Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("grouped-store")
                            .withValueSerde(Serdes.String())));
            default -> throw unknown("aggregation", aggregation);
        };
        table.toStream().to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), outValues));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), outValues.deserializer());
    }

    /**
     * Serdes carried forward (KStreamImpl): stream("in", Consumed.with(String, values)), then
     * the "step": "filter" (keeps both serdes) or "to_string" (mapValues to the value's text,
     * which forgets the value serde); with "repartition", repartition(Repartitioned.with(String,
     * that serde).withName("rp")); with "join", a join with stream("table") under
     * StreamJoined.with(String, that serde, values), windows of 3 ms without grace; then
     * groupByKey().count() and to("out") with no Grouped, Materialized or Produced: Kafka takes
     * the serdes it carried (the runner sets no default serdes, so a missing one would fail).
     */
    static Built serdeFlow(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, Object> stream = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values));
        String step = params.get("step").asText();
        stream = switch (step) {
            case "filter" -> stream.filter((k, v) -> true);
            case "to_string" -> stream.mapValues(v -> v == null ? null : (Object) String.valueOf(v));
            default -> throw unknown("serde_flow step", step);
        };
        if (params.hasNonNull("repartition")) {
            Serde<Object> serde = serde(params.get("repartition").asText());
            stream = stream.repartition(Repartitioned.with(Serdes.String(), serde).withName("rp"));
        }
        if (params.hasNonNull("join")) {
            KStream<String, Object> other = builder.stream(TABLE_TOPIC, Consumed.with(Serdes.String(), values));
            Serde<Object> serde = serde(params.get("join").asText());
            stream = stream.join(other, (v, o) -> (Object) joined(v, o),
                    JoinWindows.ofTimeDifferenceWithNoGrace(Duration.ofMillis(3)),
                    StreamJoined.with(Serdes.String(), serde, values));
        }
        if (!params.hasNonNull("window")) {
            KStream<String, Long> counts = stream.groupByKey().count().toStream();
            if (params.hasNonNull("produced")) {  // an explicit value serde wins over the carried Long
                counts.to(Main.OUTPUT_TOPIC, Produced.valueSerde(cast(serde(params.get("produced").asText()))));
            } else {
                counts.to(Main.OUTPUT_TOPIC);
            }
            return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.Long().deserializer()));
        }
        // Windowed: the store takes the carried key serde and Long; the table knows a windowed
        // serde of the key's and Long, suppress keeps them for its buffer, and to() takes them.
        Duration size = Duration.ofMillis(5);
        String window = params.get("window").asText();
        KTable<Windowed<String>, Long> counts = switch (window) {
            case "tumbling" -> stream.groupByKey().windowedBy(TimeWindows.ofSizeWithNoGrace(size)).count();
            case "session" -> stream.groupByKey().windowedBy(SessionWindows.ofInactivityGapWithNoGrace(size)).count();
            default -> throw unknown("serde_flow window", window);
        };
        if (params.path("suppressed").asBoolean(false)) {
            counts = counts.suppress(Suppressed.untilWindowCloses(BufferConfig.unbounded()));
        }
        Serde<Windowed<String>> keys = window.equals("session")
                ? WindowedSerdes.sessionWindowedSerdeFrom(String.class)
                : WindowedSerdes.timeWindowedSerdeFrom(String.class, size.toMillis());
        counts.toStream().to(Main.OUTPUT_TOPIC);
        return new Built(builder.build(), cast(keys.deserializer()), cast(Serdes.Long().deserializer()));
    }

    /**
     * A store with Bytes serdes: stream("in") mapped to bytes (the key's UTF-8; the value's
     * text's UTF-8 after 0xff 0x00, so never UTF-8 text), groupByKey(Grouped.with(Bytes,
     * Bytes)) into the store "bytes-store" named with Materialized.as and given no serde
     * (Kafka's defaults: the Grouped key serde, a count's Long, a reduce's Grouped value
     * serde); a reduce keeps the last 6 bytes of agg + value. Out: the key's and the
     * value's lower-case hex (a count: its decimal text), as Strings.
     */
    static Built bytesStore(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KGroupedStream<Bytes, Bytes> grouped = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values))
                .map((k, v) -> KeyValue.pair(k == null ? null : Bytes.wrap(utf8(k)),
                        v == null ? null : Bytes.wrap(marked(String.valueOf(v)))))
                .groupByKey(Grouped.with(Serdes.Bytes(), Serdes.Bytes()));
        String aggregation = params.get("aggregation").asText();
        if (params.hasNonNull("window")) {
            return bytesStoreSuppressed(builder, grouped, aggregation, params.get("window").asLong());
        }
        KTable<Bytes, String> table = switch (aggregation) {
            case "count" -> grouped.count(Materialized.as("bytes-store")).mapValues(n -> Long.toString(n));
            case "reduce" -> grouped.reduce(Topologies::tail, Materialized.as("bytes-store"))
                    .mapValues(v -> HexFormat.of().formatHex(v.get()));
            default -> throw unknown("aggregation", aggregation);
        };
        table.toStream()
                .map((k, v) -> KeyValue.pair(HexFormat.of().formatHex(k.get()), v))
                .to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.String()));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    /**
     * bytesStore's windowed case: tumbling windows of {@code size} ms with no grace, the
     * table suppressed until its windows close (the buffer serializes with the table's
     * serdes: the windowed Bytes key, a count's Long or a reduce's Bytes). Out: the inner
     * key's hex + "@" + the window start, and the value as bytesStore's.
     */
    static Built bytesStoreSuppressed(StreamsBuilder builder, KGroupedStream<Bytes, Bytes> grouped,
            String aggregation, long size) {
        TimeWindowedKStream<Bytes, Bytes> windowed = grouped.windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(size)));
        KTable<Windowed<Bytes>, String> table = switch (aggregation) {
            case "count" -> windowed.count(Materialized.as("bytes-store"))
                    .suppress(Suppressed.untilWindowCloses(BufferConfig.unbounded()))
                    .mapValues(n -> Long.toString(n));
            case "reduce" -> windowed.reduce(Topologies::tail, Materialized.as("bytes-store"))
                    .suppress(Suppressed.untilWindowCloses(BufferConfig.unbounded()))
                    .mapValues(v -> HexFormat.of().formatHex(v.get()));
            default -> throw unknown("aggregation", aggregation);
        };
        table.toStream()
                .map((w, v) -> KeyValue.pair(HexFormat.of().formatHex(w.key().get()) + "@" + w.window().start(), v))
                .to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.String()));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    /** 0xff 0x00, then the text's UTF-8. */
    static byte[] marked(String text) {
        byte[] body = utf8(text);
        byte[] out = new byte[body.length + 2];
        out[0] = (byte) 0xff;
        System.arraycopy(body, 0, out, 2, body.length);
        return out;
    }

    /** The last 6 bytes of agg + value. */
    static Bytes tail(Bytes agg, Bytes value) {
        byte[] both = new byte[agg.get().length + value.get().length];
        System.arraycopy(agg.get(), 0, both, 0, agg.get().length);
        System.arraycopy(value.get(), 0, both, agg.get().length, value.get().length);
        return Bytes.wrap(Arrays.copyOfRange(both, Math.max(0, both.length - 6), both.length));
    }

    /** The grouped_serdes kind's new key: "a" and "b" become "ab", "c" stays (null: null). */
    static String regroup(String key) {
        return key == null ? null : key.equals("c") ? "c" : "ab";
    }

    /** A window store with String keys and {@code values}, kept "retention" ms when set. */
    static <V> Materialized<String, V, WindowStore<Bytes, byte[]>> windowStore(Serde<V> values, JsonNode params) {
        Materialized<String, V, WindowStore<Bytes, byte[]>> m =
                Materialized.<String, V, WindowStore<Bytes, byte[]>>with(Serdes.String(), values);
        return hasRetention(params) ? m.withRetention(millis(params, "retention")) : m;
    }

    /** A session store with String keys and {@code values}, kept "retention" ms when set. */
    static <V> Materialized<String, V, SessionStore<Bytes, byte[]>> sessionStore(Serde<V> values, JsonNode params) {
        Materialized<String, V, SessionStore<Bytes, byte[]>> m =
                Materialized.<String, V, SessionStore<Bytes, byte[]>>with(Serdes.String(), values);
        return hasRetention(params) ? m.withRetention(millis(params, "retention")) : m;
    }

    static boolean hasRetention(JsonNode params) {
        return !params.path("retention").isNull() && !params.path("retention").isMissingNode();
    }

    /** groupByKey().windowedBy(TimeWindows) (tumbling, or hopping with "advance"). */
    static Built timeWindowedAggregate(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        Duration size = millis(params, "size");
        TimeWindows windows = params.path("grace").isNull() || params.path("grace").isMissingNode()
                ? TimeWindows.ofSizeWithNoGrace(size)
                : TimeWindows.ofSizeAndGrace(size, millis(params, "grace"));
        if (!params.path("advance").isNull() && !params.path("advance").isMissingNode()) {
            windows = windows.advanceBy(millis(params, "advance"));
        }
        return timeWindowed(builder, grouped(builder, values).windowedBy(windows), size, params, values);
    }

    /**
     * groupByKey().windowedBy(SlidingWindows) (KIP-450): "time_difference", and "grace" (none:
     * ofTimeDifferenceWithNoGrace). A window's end is its start + the time difference (inclusive).
     */
    static Built slidingWindowedAggregate(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        Duration difference = millis(params, "time_difference");
        SlidingWindows windows = params.path("grace").isNull() || params.path("grace").isMissingNode()
                ? SlidingWindows.ofTimeDifferenceWithNoGrace(difference)
                : SlidingWindows.ofTimeDifferenceAndGrace(difference, millis(params, "grace"));
        return timeWindowed(builder, grouped(builder, values).windowedBy(windows), difference, params, values);
    }

    /** count / reduce / aggregate of a time-windowed stream (windows of "size"), suppressed if asked, to "out". */
    static Built timeWindowed(StreamsBuilder builder, TimeWindowedKStream<String, Object> windowed,
                              Duration size, JsonNode params, Serde<Object> values) {
        String aggregation = params.get("aggregation").asText();
        Serde<Object> outValues = resultSerde(aggregation, values);
        KTable<Windowed<String>, Object> table = switch (aggregation) {
            case "count" -> cast(windowed.count(windowStore(Serdes.Long(), params)));
            case "reduce" -> windowed.reduce(Topologies::sum, windowStore(values, params));
            case "aggregate" -> cast(windowed.aggregate(
                    Topologies::init, (k, v, agg) -> append(agg, v),
                    windowStore(Serdes.String(), params)));
            default -> throw unknown("aggregation", aggregation);
        };
        // A time-windowed key is serialized as key and start: the reader adds the size.
        Serde<Windowed<String>> keys = WindowedSerdes.timeWindowedSerdeFrom(String.class, size.toMillis());
        table = suppress(table, params.get("suppress"));
        table.toStream().to(Main.OUTPUT_TOPIC, Produced.with(keys, outValues));
        return new Built(builder.build(), cast(keys.deserializer()), outValues.deserializer());
    }

    /** groupByKey().windowedBy(SessionWindows); aggregate merges with "&". */
    static Built sessionWindowedAggregate(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        Duration gap = millis(params, "gap");
        SessionWindows windows = params.path("grace").isNull() || params.path("grace").isMissingNode()
                ? SessionWindows.ofInactivityGapWithNoGrace(gap)
                : SessionWindows.ofInactivityGapAndGrace(gap, millis(params, "grace"));
        SessionWindowedKStream<String, Object> windowed = grouped(builder, values).windowedBy(windows);
        String aggregation = params.get("aggregation").asText();
        Serde<Object> outValues = resultSerde(aggregation, values);
        KTable<Windowed<String>, Object> table = switch (aggregation) {
            case "count" -> cast(windowed.count(sessionStore(Serdes.Long(), params)));
            case "reduce" -> windowed.reduce(Topologies::sum, sessionStore(values, params));
            case "aggregate" -> cast(windowed.aggregate(
                    Topologies::init, (k, v, agg) -> append(agg, v), (k, one, two) -> one + "&" + two,
                    sessionStore(Serdes.String(), params)));
            default -> throw unknown("aggregation", aggregation);
        };
        Serde<Windowed<String>> keys = WindowedSerdes.sessionWindowedSerdeFrom(String.class);
        table = suppress(table, params.get("suppress"));
        table.toStream().to(Main.OUTPUT_TOPIC, Produced.with(keys, outValues));
        return new Built(builder.build(), cast(keys.deserializer()), outValues.deserializer());
    }

    // -- stateless operators (scenario.py's StatelessParams has the functions in words) ------

    static final String OTHER_TOPIC = "other";  // the second input of "merge_other"

    /** stream("in") through the "ops" in turn, then to "out", or groupByKey().count() when "count". */
    static Built stateless(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, Object> stream = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values));
        int i = 0;
        for (JsonNode op : params.get("ops")) {
            final int index = i++;
            stream = switch (op.asText()) {
                case "flat_map" -> stream.flatMap(Topologies::flatMapped);
                case "flat_map_values" -> stream.flatMapValues(Topologies::flatMappedValues);
                case "split" -> split(stream, index);
                case "split_no_default" -> splitNoDefault(stream, index);
                case "repartition" -> stream.repartition(Repartitioned.with(Serdes.String(), values));
                case "merge_other" -> stream.merge(builder.stream(OTHER_TOPIC, Consumed.with(Serdes.String(), values)));
                default -> throw unknown("stateless op", op.asText());
            };
        }
        if (params.path("count").asBoolean(false)) {
            stream.groupByKey(Grouped.with(Serdes.String(), values))
                    .count(Materialized.with(Serdes.String(), Serdes.Long()))
                    .toStream().to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.Long()));
            return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.Long().deserializer()));
        }
        stream.to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), values));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), values.deserializer());
    }

    static long num(Object value) {
        return value instanceof Long n ? n : Long.parseLong(((String) value).substring(1));
    }

    static Object plus(Object value, long n) {
        return value instanceof Long v ? (Object) (v + n) : "v" + (num(value) + n);
    }

    static List<KeyValue<String, Object>> flatMapped(String key, Object value) {
        List<KeyValue<String, Object>> out = new ArrayList<>();
        if (value == null) {
            out.add(KeyValue.pair(key, null));
            return out;
        }
        String other = key == null ? "z" : (key.equals("a") ? null : key + "1");
        int n = String.valueOf(value).length() % 3;
        if (n > 0) {
            out.add(KeyValue.pair(key, value));
        }
        if (n > 1) {
            out.add(KeyValue.pair(other, value));
        }
        return out;
    }

    static List<Object> flatMappedValues(Object value) {
        if (value == null) {
            return Arrays.asList(null, null);
        }
        return num(value) % 2 == 0 ? List.of() : List.of(value, plus(value, 1));
    }

    static KStream<String, Object> split(KStream<String, Object> stream, int i) {
        String prefix = "s" + i + "-";
        Map<String, KStream<String, Object>> branches = stream.split(Named.as(prefix))
                .branch((k, v) -> v != null && num(v) > 5, Branched.as("big"))
                .branch((k, v) -> v == null)
                .defaultBranch();
        KStream<String, Object> big = branches.get(prefix + "big").mapValues(v -> plus(v, 10));
        KStream<String, Object> rest = branches.get(prefix + "0").filter((k, v) -> num(v) % 3 != 0);
        return big.merge(branches.get(prefix + "2")).merge(rest).merge(stream.filter((k, v) -> "a".equals(k)));
    }

    static KStream<String, Object> splitNoDefault(KStream<String, Object> stream, int i) {
        String prefix = "n" + i + "-";
        Map<String, KStream<String, Object>> branches = stream.split(Named.as(prefix))
                .branch((k, v) -> v != null && num(v) % 2 == 0, Branched.as("even"))
                .branch((k, v) -> k == null, Branched.withFunction(s -> s.mapValues(v -> v), "nokey"))
                .noDefaultBranch();
        return branches.get(prefix + "even").merge(branches.get(prefix + "nokey"));
    }

    // -- joins ---------------------------------------------------------------------------------

    static final String TABLE_TOPIC = "table";  // a join's second input

    /** stream("in").join/leftJoin(table("table")); the table versioned when "history_retention" is set. */
    static Built streamTableJoin(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, Object> table = table(builder, TABLE_TOPIC, "table-store", params.get("history_retention"), values);
        KStream<String, Object> stream = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values));
        if (params.path("rekey").asBoolean(false)) {
            // A key change (the identity to the keys, not to Kafka): the join reads the stream
            // through a repartition topic, typed by Joined's serdes, no repartition() given.
            stream = stream.selectKey((k, v) -> k);
        }
        Joined<String, Object, Object> joined = Joined.with(Serdes.String(), values, values);
        String join = params.get("join").asText();
        KStream<String, String> result = switch (join) {
            case "inner" -> stream.join(table, Topologies::joined, joined);
            case "left" -> stream.leftJoin(table, Topologies::joined, joined);
            default -> throw unknown("stream-table join", join);
        };
        result.to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.String()));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    /** table("in").join/leftJoin/outerJoin(table("table")), each side versioned when its retention is set. */
    static Built tableTableJoin(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, Object> left = table(builder, INPUT_TOPIC, "left-store", params.get("left_retention"), values);
        KTable<String, Object> right = table(builder, TABLE_TOPIC, "right-store", params.get("right_retention"), values);
        ValueJoiner<Object, Object, String> joiner = Topologies::joined;
        // Only a value serde: the store's key serde is the left table's (KTableImpl.doJoin).
        Materialized<String, String, KeyValueStore<Bytes, byte[]>> materialized =
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("joined")
                        .withValueSerde(Serdes.String());
        boolean materialize = params.path("materialized").asBoolean(false);
        String join = params.get("join").asText();
        KTable<String, String> result = switch (join) {
            case "inner" -> materialize ? left.join(right, joiner, materialized) : left.join(right, joiner);
            case "left" -> materialize ? left.leftJoin(right, joiner, materialized) : left.leftJoin(right, joiner);
            case "outer" -> materialize ? left.outerJoin(right, joiner, materialized) : left.outerJoin(right, joiner);
            default -> throw unknown("table-table join", join);
        };
        // The result's serdes, taken by to(): its store's when materialized, else the left
        // table's key serde and no value serde (so the runner gives that one).
        if (materialize) {
            result.toStream().to(Main.OUTPUT_TOPIC);
        } else {
            result.toStream().to(Main.OUTPUT_TOPIC, Produced.valueSerde(Serdes.String()));
        }
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    /**
     * stream("in").join/leftJoin/outerJoin(stream("table"), joiner, JoinWindows): windows of
     * "diff" ms with "grace" ms (none when null), then .before("before") and .after("after")
     * when set.
     */
    static Built streamStreamJoin(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, Object> left = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values));
        KStream<String, Object> right = builder.stream(TABLE_TOPIC, Consumed.with(Serdes.String(), values));
        Duration diff = millis(params, "diff");
        JoinWindows windows = params.path("grace").isNull() || params.path("grace").isMissingNode()
                ? JoinWindows.ofTimeDifferenceWithNoGrace(diff)
                : JoinWindows.ofTimeDifferenceAndGrace(diff, millis(params, "grace"));
        if (params.hasNonNull("before")) {
            windows = windows.before(millis(params, "before"));
        }
        if (params.hasNonNull("after")) {
            windows = windows.after(millis(params, "after"));
        }
        StreamJoined<String, Object, Object> joined = StreamJoined.with(Serdes.String(), values, values);
        ValueJoiner<Object, Object, String> joiner = Topologies::joined;
        String join = params.get("join").asText();
        KStream<String, String> result = switch (join) {
            case "inner" -> left.join(right, joiner, windows, joined);
            case "left" -> left.leftJoin(right, joiner, windows, joined);
            case "outer" -> left.outerJoin(right, joiner, windows, joined);
            default -> throw unknown("stream-stream join", join);
        };
        result.to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.String()));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    /**
     * A stream-stream join with Bytes (issue 26): stream("in") and stream("table"), a side
     * named in "sides" ("left", "right" or "both") with its values mapped to bytes (0xff
     * 0x00 then the value's text's UTF-8, a null staying null); with "keys", both sides'
     * keys mapped to their UTF-8 bytes by selectKey (so both go through repartition topics
     * with the StreamJoined serdes). StreamJoined.with(key: Bytes or String, each side's
     * value: Bytes or the input's): the buffers and the waiting store serialize with them.
     * Windows "diff" ms with "grace" ms (none when null). Out: the key (its hex when
     * bytes) and "left|right", a bytes value as its hex, a null as "null".
     */
    static Built bytesStreamJoin(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        String sides = params.get("sides").asText();
        boolean keys = params.get("keys").asBoolean();
        KStream<Object, Object> left = bytesSide(builder, INPUT_TOPIC, values, !sides.equals("right"), keys);
        KStream<Object, Object> right = bytesSide(builder, TABLE_TOPIC, values, !sides.equals("left"), keys);
        Duration diff = millis(params, "diff");
        JoinWindows windows = params.hasNonNull("grace")
                ? JoinWindows.ofTimeDifferenceAndGrace(diff, millis(params, "grace"))
                : JoinWindows.ofTimeDifferenceWithNoGrace(diff);
        Serde<Object> keySerde = keys ? cast(Serdes.Bytes()) : cast(Serdes.String());
        StreamJoined<Object, Object, Object> joined = StreamJoined.with(keySerde,
                sides.equals("right") ? values : cast(Serdes.Bytes()),
                sides.equals("left") ? values : cast(Serdes.Bytes()));
        ValueJoiner<Object, Object, String> joiner = (l, r) -> shown(l) + "|" + shown(r);
        String join = params.get("join").asText();
        KStream<Object, String> result = switch (join) {
            case "inner" -> left.join(right, joiner, windows, joined);
            case "left" -> left.leftJoin(right, joiner, windows, joined);
            case "outer" -> left.outerJoin(right, joiner, windows, joined);
            default -> throw unknown("stream-stream join", join);
        };
        result.map((k, v) -> KeyValue.pair(shown(k), v))
                .to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.String()));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    /** One side of bytesStreamJoin: its values as marked bytes when asked, its keys as bytes. */
    static KStream<Object, Object> bytesSide(StreamsBuilder builder, String topic, Serde<Object> values,
            boolean bytesValues, boolean bytesKeys) {
        KStream<Object, Object> side = cast(builder.stream(topic, Consumed.with(Serdes.String(), values)));
        if (bytesValues) {
            side = side.mapValues(v -> v == null ? null : (Object) Bytes.wrap(marked(String.valueOf(v))));
        }
        if (bytesKeys) {
            side = side.selectKey((k, v) -> k == null ? null : (Object) Bytes.wrap(utf8((String) k)));
        }
        return side;
    }

    /** A key or value as bytesStreamJoin writes it: bytes as hex, null as "null", else its text. */
    static String shown(Object value) {
        return value instanceof Bytes b ? HexFormat.of().formatHex(b.get()) : String.valueOf(value);
    }

    /** The foreign key of a value whose num is n: "a", "b", "c" for n mod 4 = 0, 1, 2; null for 3. */
    static String foreignKey(Object value) {
        int n = (int) Math.floorMod(num(value), 4L);
        return n == 3 ? null : String.valueOf("abc".charAt(n));
    }

    /** table("in").join/leftJoin(table("table"), foreignKey, joiner) (KIP-213), materialized when asked. */
    static Built fkJoin(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, Object> left = table(builder, INPUT_TOPIC, "left-store", null, values);
        KTable<String, Object> right = table(builder, TABLE_TOPIC, "right-store", null, values);
        java.util.function.Function<Object, String> fk = Topologies::foreignKey;
        ValueJoiner<Object, Object, String> joiner = Topologies::joined;
        // Only a value serde: the store's key serde is the left table's (doJoinOnForeignKey).
        Materialized<String, String, KeyValueStore<Bytes, byte[]>> materialized =
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("joined")
                        .withValueSerde(Serdes.String());
        boolean materialize = params.path("materialized").asBoolean(false);
        String join = params.get("join").asText();
        KTable<String, String> result = switch (join) {
            case "inner" -> materialize ? left.join(right, fk, joiner, materialized) : left.join(right, fk, joiner);
            case "left" -> materialize ? left.leftJoin(right, fk, joiner, materialized) : left.leftJoin(right, fk, joiner);
            default -> throw unknown("foreign-key join", join);
        };
        // The result's serdes, taken by to(): the left table's key serde, and the store's
        // value serde when materialized (else none known, so the runner gives it).
        if (materialize) {
            result.toStream().to(Main.OUTPUT_TOPIC);
        } else {
            result.toStream().to(Main.OUTPUT_TOPIC, Produced.valueSerde(Serdes.String()));
        }
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    /** bytesFkJoin's foreign keys as hex, by num(value) mod 6 (null: none). */
    static final String[] HEX_FOREIGN_KEYS = {"", "00", "0000", "ff", "ff00", null};

    /**
     * A foreign-key join of tables keyed by Bytes (issue 26): "keys" says which ("both",
     * "this", "other"). A Bytes side is stream(topic).map(key: its hex parsed).toTable(
     * Materialized.with(Bytes, values)) (through a repartition topic, as toTable after a key
     * change), a String side table(topic). The foreign key is HEX_FOREIGN_KEYS[num mod 6],
     * parsed when the other table is keyed by Bytes; the joiner writes "left|right", the
     * result is materialized when asked; out's key is the primary key's hex (Bytes) or itself.
     */
    static Built bytesFkJoin(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        String keys = params.get("keys").asText();
        boolean otherBytes = !keys.equals("this");
        KTable<Object, Object> left = keyedTable(builder, INPUT_TOPIC, !keys.equals("other"), values);
        KTable<Object, Object> right = keyedTable(builder, TABLE_TOPIC, otherBytes, values);
        java.util.function.Function<Object, Object> fk = v -> {
            String hex = HEX_FOREIGN_KEYS[(int) Math.floorMod(num(v), 6L)];
            return hex == null ? null : otherBytes ? Bytes.wrap(HexFormat.of().parseHex(hex)) : hex;
        };
        ValueJoiner<Object, Object, String> joiner = Topologies::joined;
        Materialized<Object, String, KeyValueStore<Bytes, byte[]>> materialized =
                Materialized.<Object, String, KeyValueStore<Bytes, byte[]>>as("joined")
                        .withValueSerde(Serdes.String());
        boolean materialize = params.path("materialized").asBoolean(false);
        KTable<Object, String> result = switch (params.get("join").asText()) {
            case "inner" -> materialize ? left.join(right, fk, joiner, materialized) : left.join(right, fk, joiner);
            case "left" -> materialize ? left.leftJoin(right, fk, joiner, materialized) : left.leftJoin(right, fk, joiner);
            default -> throw unknown("foreign-key join", params.get("join").asText());
        };
        result.toStream()
                .map((k, v) -> KeyValue.pair(k instanceof Bytes b ? HexFormat.of().formatHex(b.get()) : (String) k, v))
                .to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.String()));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.String().deserializer()));
    }

    /** bytesFkJoin's table of topic: keyed by its keys' hex parsed (Bytes) or by them (String). */
    static KTable<Object, Object> keyedTable(StreamsBuilder builder, String topic, boolean bytes, Serde<Object> values) {
        if (!bytes) {
            return cast(builder.table(topic, Consumed.with(Serdes.String(), values)));
        }
        KTable<Bytes, Object> table = builder.stream(topic, Consumed.with(Serdes.String(), values))
                .map((k, v) -> KeyValue.pair(k == null ? null : Bytes.wrap(HexFormat.of().parseHex(k)), v))
                .toTable(Materialized.with(Serdes.Bytes(), values));
        return cast(table);
    }

    // -- the Processor API -------------------------------------------------------------------

    /**
     * A per-key running count in key-value store "counts", forwarding (key, count) for each
     * record with a key; a stream-time punctuator every interval ms forwards (key, -count) at
     * the punctuation's stream time for each key in key order and clears the store. The
     * store's serdes by the "store" param (CountStore). Its twin is lakestate_kinds.py's
     * _Counter.
     */
    static Built processor(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        CountStore counts = new CountStore(params.path("store").asText("long"));
        builder.addStateStore(Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore("counts"), counts.keySerde(), counts.valueSerde()));
        Duration interval = millis(params, "interval");
        KStream<String, Object> in = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values));
        KStream<String, Long> counted = params.path("fixed_key").asBoolean(false)
                ? in.processValues(() -> new FixedKeyCounter(interval, counts), "counts")
                : in.process(() -> new Counter(interval, counts), "counts");
        counted.to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.Long()));
        return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(Serdes.Long().deserializer()));
    }

    /**
     * How the counters hold a count in store "counts": "long" with String keys and Long
     * values; "bytes" with Bytes keys (the key's UTF-8) and Bytes values (the count's decimal
     * text), so all() goes in unsigned byte order; "string" with a String value serde, which
     * a Long count does not fit (the first put fails: "not compatible").
     */
    record CountStore(String kind) {
        boolean bytes() {
            return kind.equals("bytes");
        }

        Serde<Object> keySerde() {
            return cast(bytes() ? Serdes.Bytes() : Serdes.String());
        }

        Serde<Object> valueSerde() {
            return cast(switch (kind) {
                case "bytes" -> Serdes.Bytes();
                case "string" -> Serdes.String();
                default -> Serdes.Long();
            });
        }

        Object key(String key) {
            return bytes() ? Bytes.wrap(key.getBytes(StandardCharsets.UTF_8)) : key;
        }

        String keyBack(Object key) {
            return bytes() ? new String(((Bytes) key).get(), StandardCharsets.UTF_8) : (String) key;
        }

        Object value(long count) {
            return bytes() ? Bytes.wrap(Long.toString(count).getBytes(StandardCharsets.UTF_8)) : (Object) count;
        }

        long valueBack(Object value) {
            if (value == null) {
                return 0L;
            }
            return bytes() ? Long.parseLong(new String(((Bytes) value).get(), StandardCharsets.UTF_8)) : (Long) value;
        }

        /** The key's count plus one, put and returned. */
        long increment(KeyValueStore<Object, Object> store, String key) {
            long next = valueBack(store.get(key(key))) + 1;
            store.put(key(key), value(next));
            return next;
        }

        /** The counts in key order, read before any is deleted. */
        List<KeyValue<String, Long>> drain(KeyValueStore<Object, Object> store) {
            List<KeyValue<Object, Object>> all = new ArrayList<>();
            try (KeyValueIterator<Object, Object> it = store.all()) {
                it.forEachRemaining(all::add);
            }
            List<KeyValue<String, Long>> counts = new ArrayList<>();
            for (KeyValue<Object, Object> entry : all) {
                store.delete(entry.key);
                counts.add(KeyValue.pair(keyBack(entry.key), valueBack(entry.value)));
            }
            return counts;
        }
    }

    static final class Counter implements Processor<String, Object, String, Long> {
        private final Duration interval;
        private final CountStore counts;
        private ProcessorContext<String, Long> context;
        private KeyValueStore<Object, Object> store;

        Counter(Duration interval, CountStore counts) {
            this.interval = interval;
            this.counts = counts;
        }

        @Override
        public void init(ProcessorContext<String, Long> context) {
            this.context = context;
            this.store = context.getStateStore("counts");
            context.schedule(interval, PunctuationType.STREAM_TIME, this::flush);
        }

        @Override
        public void process(Record<String, Object> record) {
            if (record.key() == null) {
                return;
            }
            context.forward(record.withValue(counts.increment(store, record.key())));
        }

        void flush(long streamTime) {
            for (KeyValue<String, Long> entry : counts.drain(store)) {
                context.forward(new Record<>(entry.key, -entry.value, streamTime));
            }
        }
    }

    /** The same for processValues: a punctuator forwards the last record seen of each key. */
    static final class FixedKeyCounter implements FixedKeyProcessor<String, Object, Long> {
        private final Duration interval;
        private final CountStore counts;
        private final Map<String, FixedKeyRecord<String, Object>> last = new java.util.HashMap<>();
        private FixedKeyProcessorContext<String, Long> context;
        private KeyValueStore<Object, Object> store;

        FixedKeyCounter(Duration interval, CountStore counts) {
            this.interval = interval;
            this.counts = counts;
        }

        @Override
        public void init(FixedKeyProcessorContext<String, Long> context) {
            this.context = context;
            this.store = context.getStateStore("counts");
            context.schedule(interval, PunctuationType.STREAM_TIME, this::flush);
        }

        @Override
        public void process(FixedKeyRecord<String, Object> record) {
            if (record.key() == null) {
                return;
            }
            last.put(record.key(), record);
            context.forward(record.withValue(counts.increment(store, record.key())));
        }

        void flush(long streamTime) {
            for (KeyValue<String, Long> entry : counts.drain(store)) {
                context.forward(last.get(entry.key).withValue(-entry.value).withTimestamp(streamTime));
            }
        }
    }

    /** A table on topic, in a versioned store keeping retention ms when set, else a key-value store. */
    static KTable<String, Object> table(
            StreamsBuilder builder, String topic, String store, JsonNode retention, Serde<Object> values) {
        Materialized<String, Object, KeyValueStore<Bytes, byte[]>> materialized =
                retention == null || retention.isNull()
                        ? Materialized.as(store)
                        : Materialized.as(Stores.persistentVersionedKeyValueStore(
                                store, Duration.ofMillis(retention.asLong())));
        return builder.table(topic, Consumed.with(Serdes.String(), values),
                materialized.withKeySerde(Serdes.String()).withValueSerde(values));
    }

    /** The joiner of every join kind: "left|right", a null as "null". */
    static String joined(Object left, Object right) {
        return left + "|" + right;
    }

    // -- cogroup (KIP-150) -----------------------------------------------------------------

    /** An aggregator appending sign and value ("null" for a null). */
    static Aggregator<String, Object, String> appender(String sign) {
        return (k, v, agg) -> agg + sign + v;
    }

    /**
     * stream("in").groupByKey().cogroup("+"), cogroup(stream("table").groupByKey(), "-"), with
     * "repartition" cogroup(stream("other").selectKey(identity).groupByKey(), "*"); then
     * aggregate("0"), or per "windows" (tumbling, hopping, sliding, session; "size" is the size,
     * time difference or gap) with "grace" (none when null) first.
     */
    static Built cogroup(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        Grouped<String, Object> grouped = Grouped.with(Serdes.String(), values);
        CogroupedKStream<String, String> cogrouped = grouped(builder, values).cogroup(appender("+"));
        cogrouped = cogrouped.cogroup(builder.stream(TABLE_TOPIC, Consumed.with(Serdes.String(), values))
                .groupByKey(grouped), appender("-"));
        // "serdes": the repartitioned input's Grouped is named "cg" and has that value serde,
        // and the result goes to "out" with the serdes the table knows (its store's).
        boolean typed = params.hasNonNull("serdes");
        if (params.path("repartition").asBoolean(false)) {
            Grouped<String, Object> regrouped = typed
                    ? Grouped.with("cg", Serdes.String(), serde(params.get("serdes").asText())) : grouped;
            cogrouped = cogrouped.cogroup(builder.stream(OTHER_TOPIC, Consumed.with(Serdes.String(), values))
                    .selectKey((k, v) -> k).groupByKey(regrouped), appender("*"));
        }
        Materialized<String, String, KeyValueStore<Bytes, byte[]>> keyValue =
                Materialized.with(Serdes.String(), Serdes.String());
        String shape = params.path("windows").asText("none");
        boolean noGrace = !params.hasNonNull("grace");
        Duration size = millis(params, "size");
        Serde<String> strings = Serdes.String();
        if (shape.equals("none")) {
            KStream<String, String> result = cogrouped.aggregate(Topologies::init, keyValue).toStream();
            if (typed) {
                result.to(Main.OUTPUT_TOPIC);
            } else {
                result.to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), strings));
            }
            return new Built(builder.build(), cast(Serdes.String().deserializer()), cast(strings.deserializer()));
        }
        KTable<Windowed<String>, String> table;
        Serde<Windowed<String>> keys;
        switch (shape) {
            case "tumbling", "hopping" -> {
                TimeWindows windows = noGrace ? TimeWindows.ofSizeWithNoGrace(size)
                        : TimeWindows.ofSizeAndGrace(size, millis(params, "grace"));
                if (params.hasNonNull("advance")) {
                    windows = windows.advanceBy(millis(params, "advance"));
                }
                table = cogrouped.windowedBy(windows).aggregate(Topologies::init, Materialized.with(Serdes.String(), strings));
                keys = WindowedSerdes.timeWindowedSerdeFrom(String.class, size.toMillis());
            }
            case "sliding" -> {
                SlidingWindows windows = noGrace ? SlidingWindows.ofTimeDifferenceWithNoGrace(size)
                        : SlidingWindows.ofTimeDifferenceAndGrace(size, millis(params, "grace"));
                table = cogrouped.windowedBy(windows).aggregate(Topologies::init, Materialized.with(Serdes.String(), strings));
                keys = WindowedSerdes.timeWindowedSerdeFrom(String.class, size.toMillis());
            }
            case "session" -> {
                SessionWindows windows = noGrace ? SessionWindows.ofInactivityGapWithNoGrace(size)
                        : SessionWindows.ofInactivityGapAndGrace(size, millis(params, "grace"));
                table = cogrouped.windowedBy(windows).aggregate(
                        Topologies::init, (k, one, two) -> one + "&" + two, Materialized.with(Serdes.String(), strings));
                keys = WindowedSerdes.sessionWindowedSerdeFrom(String.class);
            }
            default -> throw unknown("cogroup windows", shape);
        }
        if (typed) {  // the table's serdes: a windowed serde of its store's key serde, and String
            table.toStream().to(Main.OUTPUT_TOPIC);
        } else {
            table.toStream().to(Main.OUTPUT_TOPIC, Produced.with(keys, strings));
        }
        return new Built(builder.build(), cast(keys.deserializer()), cast(strings.deserializer()));
    }

    // -- suppress ------------------------------------------------------------------------------

    /**
     * {"until": "window_closes" | "time_limit", "time_limit": ms, "buffer": {"max_records": n,
     * "max_bytes": n, "when_full": "emit_early" | "shut_down"}}; a buffer without limits is
     * unbounded. Null: no suppress.
     */
    static <K> KTable<K, Object> suppress(KTable<K, Object> table, JsonNode spec) {
        if (spec == null || spec.isNull()) {
            return table;
        }
        JsonNode buffer = spec.path("buffer");
        String until = spec.get("until").asText();
        return switch (until) {
            case "window_closes" -> {
                if (!(bufferConfig(buffer) instanceof Suppressed.StrictBufferConfig strict)) {
                    throw new IllegalArgumentException("until window_closes needs an unbounded or shut_down buffer");
                }
                yield table.suppress(cast(Suppressed.untilWindowCloses(strict)));
            }
            case "time_limit" -> table.suppress(Suppressed.untilTimeLimit(millis(spec, "time_limit"), bufferConfig(buffer)));
            default -> throw unknown("suppress until", until);
        };
    }

    static BufferConfig<?> bufferConfig(JsonNode buffer) {
        boolean records = buffer.hasNonNull("max_records");
        boolean bytes = buffer.hasNonNull("max_bytes");
        if (!records && !bytes) {
            return BufferConfig.unbounded();
        }
        BufferConfig<?> config = records ? BufferConfig.maxRecords(buffer.get("max_records").asLong())
                : BufferConfig.maxBytes(buffer.get("max_bytes").asLong());
        if (records && bytes) {
            config = config.withMaxBytes(buffer.get("max_bytes").asLong());
        }
        String whenFull = buffer.path("when_full").asText("emit_early");
        return switch (whenFull) {
            case "emit_early" -> config.emitEarlyWhenFull();
            case "shut_down" -> config.shutDownWhenFull();
            default -> throw unknown("buffer when_full", whenFull);
        };
    }

    // -- shared pieces -------------------------------------------------------------------------

    static KGroupedStream<String, Object> grouped(StreamsBuilder builder, Serde<Object> values) {
        return builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values))
                .groupByKey(Grouped.with(Serdes.String(), values));
    }

    // Windowed aggregations pass null values on (unwindowed ones drop them), so both
    // functions take nulls: sum counts a null as 0, append writes it as "null".
    static Object sum(Object agg, Object value) {
        return (agg == null ? 0L : (Long) agg) + (value == null ? 0L : (Long) value);
    }

    static String init() {
        return "0";
    }

    static String append(String agg, Object value) {
        return agg + "+" + value;
    }

    /** The serde of an aggregation's results: counts are longs, aggregates strings. */
    static Serde<Object> resultSerde(String aggregation, Serde<Object> values) {
        return switch (aggregation) {
            case "count" -> cast(Serdes.Long());
            case "aggregate" -> cast(Serdes.String());
            default -> values;
        };
    }

    static Serde<Object> serde(String name) {
        return switch (name) {
            case "long" -> cast(Serdes.Long());
            case "string" -> cast(Serdes.String());
            default -> throw unknown("value_serde", name);
        };
    }

    static Duration millis(JsonNode params, String field) {
        JsonNode node = params.get(field);
        if (node == null || !node.isIntegralNumber()) {
            throw new IllegalArgumentException("param " + field + " must be milliseconds, got " + node);
        }
        return Duration.ofMillis(node.asLong());
    }

    static IllegalArgumentException unknown(String what, String value) {
        return new IllegalArgumentException("unknown " + what + ": " + value);
    }

    // The DSL is typed per scenario at run time; these casts erase what JSON cannot carry.
    @SuppressWarnings("unchecked")
    static <T> T cast(Object o) {
        return (T) o;
    }

    private Topologies() {}
}
