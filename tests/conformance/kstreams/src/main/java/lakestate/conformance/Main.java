package lakestate.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Plays scenarios on Kafka Streams' TopologyTestDriver: {@code Main IN.json OUT.json}.
 *
 * <p>All scenarios run in this one JVM, since starting the JVM costs more than the scenarios.
 * A scenario that fails (an unknown kind, a suppress buffer that shuts down when full) is
 * reported with its error and the records output before it; the others still run.
 */
public final class Main {
    static final String OUTPUT_TOPIC = "out";

    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Main SCENARIOS.json OUTPUTS.json");
            System.exit(2);
        }
        JsonNode input = JSON.readTree(new File(args[0]));
        ObjectNode output = JSON.createObjectNode();
        // The jars the classes came from name the releases really used.
        output.put("kafka_streams_jar", jarOf(KafkaStreams.class));
        output.put("kafka_streams_test_utils_jar", jarOf(TopologyTestDriver.class));
        ArrayNode results = output.putArray("results");
        // Opening and closing RocksDB stores is most of a scenario's time, and much of it is
        // waiting, so scenarios run side by side (conformance.threads, default 2).
        ExecutorService pool = Executors.newFixedThreadPool(Integer.getInteger("conformance.threads", 2));
        try {
            List<Future<ObjectNode>> futures = new ArrayList<>();
            for (JsonNode scenario : input.get("scenarios")) {
                futures.add(pool.submit(() -> run(scenario)));
            }
            for (Future<ObjectNode> future : futures) {
                results.add(future.get());
            }
        } finally {
            pool.shutdown();
        }
        Files.writeString(Path.of(args[1]), JSON.writeValueAsString(output));
    }

    static String jarOf(Class<?> type) throws Exception {
        return Path.of(type.getProtectionDomain().getCodeSource().getLocation().toURI()).getFileName().toString();
    }

    static ObjectNode run(JsonNode scenario) {
        ObjectNode result = JSON.createObjectNode();
        result.put("name", scenario.path("name").asText());
        ArrayNode records = result.putArray("records");
        result.putNull("error");
        result.putNull("metrics");
        Topologies.Built built;
        try {
            built = Topologies.build(scenario.get("kind").asText(), scenario.get("params"), valueSerde(scenario));
        } catch (RuntimeException e) {
            result.put("error", describe(e));
            return result;
        }
        TopologyTestDriver driver = null;
        try {
            driver = new TopologyTestDriver(built.topology(), config());
            TestOutputTopic<Object, Object> out =
                    driver.createOutputTopic(OUTPUT_TOPIC, built.outKey(), built.outValue());
            Serializer<Object> values = Topologies.serde(valueSerde(scenario)).serializer();
            int index = 0;
            for (JsonNode in : scenario.get("inputs")) {
                TestInputTopic<String, Object> topic =
                        driver.createInputTopic(in.get("topic").asText(), new StringSerializer(), values);
                String key = in.get("key").isNull() ? null : in.get("key").asText();
                try {
                    topic.pipeInput(key, value(in.get("value"), valueSerde(scenario)), in.get("ts").asLong());
                } finally {
                    // Read after every input, so each output says which input caused it.
                    for (TestRecord<Object, Object> r : out.readRecordsToList()) {
                        records.add(record(r, index));
                    }
                }
                index++;
            }
        } catch (RuntimeException e) {
            result.put("error", describe(e));
        } finally {
            if (driver != null) {
                result.set("metrics", metrics(driver.metrics()));
                try {
                    driver.close();
                } catch (RuntimeException e) {
                    if (result.get("error").isNull()) {
                        result.put("error", describe(e));
                    }
                }
            }
        }
        return result;
    }

    static Properties config() {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "conformance");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        // No record cache: every update is forwarded, as lakestate's driver does.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // Left and outer stream-stream joins look for closed windows at every in-order record,
        // not at most once per wall-clock second (the driver's wall clock stands still), as
        // lakestate does.
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, 0L);
        try {
            // Each driver its own state directory (under java.io.tmpdir), as they run at once.
            props.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("kstreams-").toString());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return props;
    }

    static String valueSerde(JsonNode scenario) {
        return scenario.path("value_serde").asText("long");
    }

    static Object value(JsonNode node, String serde) {
        if (node == null || node.isNull()) {
            return null;
        }
        return serde.equals("long") ? (Object) node.asLong() : node.asText();
    }

    static ObjectNode record(TestRecord<Object, Object> r, int input) {
        ObjectNode node = JSON.createObjectNode();
        Object key = r.key();
        if (key instanceof Windowed<?> windowed) {
            node.set("key", JSON.valueToTree(windowed.key()));
            node.put("window_start", windowed.window().start());
            node.put("window_end", windowed.window().end());
        } else {
            node.set("key", JSON.valueToTree(key));
            node.putNull("window_start");
            node.putNull("window_end");
        }
        node.set("value", JSON.valueToTree(r.value()));
        node.put("ts", r.timestamp());
        node.put("input", input);
        return node;
    }

    /** The task-level counters the scenarios check (records dropped as null or late). */
    static ObjectNode metrics(Map<MetricName, ? extends Metric> metrics) {
        ObjectNode node = JSON.createObjectNode();
        double dropped = 0;
        for (Map.Entry<MetricName, ? extends Metric> e : metrics.entrySet()) {
            MetricName name = e.getKey();
            if (name.group().equals("stream-task-metrics") && name.name().equals("dropped-records-total")) {
                dropped += ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        node.put("dropped_records", (long) dropped);
        return node;
    }

    static String describe(Throwable e) {
        StringBuilder text = new StringBuilder(e.toString());
        for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
            text.append(" <- ").append(cause);
        }
        return text.toString();
    }

    private Main() {}
}
