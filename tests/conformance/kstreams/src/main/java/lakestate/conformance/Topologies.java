package lakestate.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.Suppressed.BufferConfig;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.state.KeyValueStore;
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
    static final Map<String, Kind> KINDS = Map.of(
            "aggregate", Topologies::aggregate,
            "time_windowed_aggregate", Topologies::timeWindowedAggregate,
            "session_windowed_aggregate", Topologies::sessionWindowedAggregate,
            "stream_table_join", Topologies::streamTableJoin,
            "table_table_join", Topologies::tableTableJoin,
            "stream_stream_join", Topologies::streamStreamJoin);

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
        TimeWindowedKStream<String, Object> windowed = grouped(builder, values).windowedBy(windows);
        String aggregation = params.get("aggregation").asText();
        Serde<Object> outValues = resultSerde(aggregation, values);
        KTable<Windowed<String>, Object> table = switch (aggregation) {
            case "count" -> cast(windowed.count(Materialized.with(Serdes.String(), Serdes.Long())));
            case "reduce" -> windowed.reduce(Topologies::sum, Materialized.with(Serdes.String(), values));
            case "aggregate" -> cast(windowed.aggregate(
                    Topologies::init, (k, v, agg) -> append(agg, v),
                    Materialized.with(Serdes.String(), Serdes.String())));
            default -> throw unknown("aggregation", aggregation);
        };
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
            case "count" -> cast(windowed.count(Materialized.with(Serdes.String(), Serdes.Long())));
            case "reduce" -> windowed.reduce(Topologies::sum, Materialized.with(Serdes.String(), values));
            case "aggregate" -> cast(windowed.aggregate(
                    Topologies::init, (k, v, agg) -> append(agg, v), (k, one, two) -> one + "&" + two,
                    Materialized.with(Serdes.String(), Serdes.String())));
            default -> throw unknown("aggregation", aggregation);
        };
        Serde<Windowed<String>> keys = WindowedSerdes.sessionWindowedSerdeFrom(String.class);
        table = suppress(table, params.get("suppress"));
        table.toStream().to(Main.OUTPUT_TOPIC, Produced.with(keys, outValues));
        return new Built(builder.build(), cast(keys.deserializer()), outValues.deserializer());
    }

    // -- joins ---------------------------------------------------------------------------------

    static final String TABLE_TOPIC = "table";  // a join's second input

    /** stream("in").join/leftJoin(table("table")); the table versioned when "history_retention" is set. */
    static Built streamTableJoin(JsonNode params, Serde<Object> values) {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, Object> table = table(builder, TABLE_TOPIC, "table-store", params.get("history_retention"), values);
        KStream<String, Object> stream = builder.stream(INPUT_TOPIC, Consumed.with(Serdes.String(), values));
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
        Materialized<String, String, KeyValueStore<Bytes, byte[]>> materialized =
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("joined")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String());
        boolean materialize = params.path("materialized").asBoolean(false);
        String join = params.get("join").asText();
        KTable<String, String> result = switch (join) {
            case "inner" -> materialize ? left.join(right, joiner, materialized) : left.join(right, joiner);
            case "left" -> materialize ? left.leftJoin(right, joiner, materialized) : left.leftJoin(right, joiner);
            case "outer" -> materialize ? left.outerJoin(right, joiner, materialized) : left.outerJoin(right, joiner);
            default -> throw unknown("table-table join", join);
        };
        result.toStream().to(Main.OUTPUT_TOPIC, Produced.with(Serdes.String(), Serdes.String()));
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
