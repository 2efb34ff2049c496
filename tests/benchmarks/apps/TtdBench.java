package lakestate.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Times Kafka Streams' TopologyTestDriver on conformance scenarios (bench_test_driver.py):
 * {@code TtdBench IN.json OUT.json}. IN holds "warmup", "rounds" and "scenarios" (the
 * conformance format); each scenario is played warmup + rounds times in this one JVM, with
 * in-memory stores and no record cache, in two modes: "record" (pipeInput, then
 * readRecordsToList, per input, as the conformance runner does) and "list" (one
 * pipeRecordList, then one readRecordsToList). OUT has the timed rounds' nanoseconds (the
 * piping and reading only: the driver is built before and closed after) and output counts.
 * Compiled into the package of the conformance runner (Topologies, Main) to build the very
 * same topologies.
 */
public final class TtdBench {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        JsonNode input = JSON.readTree(new File(args[0]));
        int warmup = input.get("warmup").asInt();
        int rounds = input.get("rounds").asInt();
        ObjectNode output = JSON.createObjectNode();
        output.put("kafka_streams_jar", Main.jarOf(TopologyTestDriver.class));
        ArrayNode results = output.putArray("results");
        for (JsonNode scenario : input.get("scenarios")) {
            for (String mode : List.of("record", "list")) {
                ObjectNode result = results.addObject();
                result.put("name", scenario.get("name").asText());
                result.put("mode", mode);
                ArrayNode nanos = result.putArray("nanos");
                long outputs = 0;
                for (int i = 0; i < warmup + rounds; i++) {
                    long[] run = play(scenario, mode.equals("list"));
                    if (i >= warmup) {
                        nanos.add(run[0]);
                    }
                    outputs = run[1];
                }
                result.put("outputs", outputs);
            }
        }
        Files.writeString(Path.of(args[1]), JSON.writeValueAsString(output));
    }

    /** One play: {nanoseconds, output records}. */
    static long[] play(JsonNode scenario, boolean asList) {
        String serde = Main.valueSerde(scenario);
        Topologies.Built built = Topologies.build(scenario.get("kind").asText(), scenario.get("params"), serde);
        List<TestRecord<String, Object>> inputs = new ArrayList<>();
        for (JsonNode in : scenario.get("inputs")) {
            String key = in.get("key").isNull() ? null : in.get("key").asText();
            inputs.add(new TestRecord<>(key, Main.value(in.get("value"), serde), null, in.get("ts").asLong()));
        }
        Properties config = Main.config();
        config.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG, BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers.class);
        try (TopologyTestDriver driver = new TopologyTestDriver(built.topology(), config)) {
            TestInputTopic<String, Object> topic = driver.createInputTopic(
                    "in", new StringSerializer(), Topologies.serde(serde).serializer());
            TestOutputTopic<Object, Object> out = driver.createOutputTopic(Main.OUTPUT_TOPIC, built.outKey(), built.outValue());
            long outputs = 0;
            long start = System.nanoTime();
            if (asList) {
                topic.pipeRecordList(inputs);
                outputs += out.readRecordsToList().size();
            } else {
                for (TestRecord<String, Object> record : inputs) {
                    topic.pipeInput(record);
                    outputs += out.readRecordsToList().size();
                }
            }
            return new long[] {System.nanoTime() - start, outputs};
        }
    }

    private TtdBench() {}
}
