package dev.strom.oracle;

import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * The end-to-end half of the oracle (issue 28): one application run as a Kafka Streams application against
 * a real cluster, beside the same application run by strom on Spark
 * (tests/spark/runtime/test_kafka_streams_pair.py builds the twin with strom's DSL).
 *
 * <p>Clicks (user to page) are re-keyed by page (a repartition topic) and counted per 10 s window with 1 h of
 * grace, only the final count of a closed window emitted (suppress); each user's click count is joined with
 * the user's region (a table-table join). Runs exactly_once_v2 until stdin closes.
 *
 * <p>Arguments: bootstrap.servers application.id state.dir clicks users page-counts user-regions
 */
public final class PageViews {
    public static final Duration WINDOW = Duration.ofSeconds(10);
    public static final Duration GRACE = Duration.ofHours(1);

    private PageViews() {}

    static Topology topology(String clicks, String users, String pageCounts, String userRegions) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> stream = builder.stream(clicks, Consumed.with(Serdes.String(), Serdes.String()));
        stream.groupBy((user, page) -> page, Grouped.with("pages", Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(WINDOW, GRACE))
            .count(Materialized.as("page-counts"))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
            .toStream((window, count) -> window.key() + "@" + window.window().start())
            .to(pageCounts, Produced.with(Serdes.String(), Serdes.Long()));
        KTable<String, Long> perUser = stream.groupByKey().count(Materialized.as("user-counts"));
        KTable<String, String> regions = builder.table(users, Consumed.with(Serdes.String(), Serdes.String()),
            Materialized.as("users"));
        perUser.join(regions, (count, region) -> region + ":" + count)
            .toStream()
            .to(userRegions, Produced.with(Serdes.String(), Serdes.String()));
        return builder.build();
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        try (KafkaStreams streams = new KafkaStreams(topology(args[3], args[4], args[5], args[6]), props)) {
            streams.start();
            System.out.println("started");
            System.out.flush();
            while (System.in.read() != -1) {
                // runs until the test closes stdin
            }
            streams.close(Duration.ofSeconds(60));
        }
    }
}
