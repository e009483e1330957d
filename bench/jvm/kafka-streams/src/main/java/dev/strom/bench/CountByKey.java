package dev.strom.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * bench/jvm_peers.py's Kafka Streams contestant: the count-by-key of JSON records every contestant runs,
 * with Kafka Streams' defaults (RocksDB store, record cache) but for exactly_once_v2 and
 * commit.interval.ms=100. The first record parsed writes the wall-clock time to the mark file (where the
 * processing rate starts). Runs until SIGTERM.
 *
 * <p>Arguments: bootstrap servers, application id, source topic, sink topic, state dir, mark file.
 */
public final class CountByKey {
    private static final ObjectMapper JSON = new ObjectMapper();

    private CountByKey() {}

    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0], applicationId = args[1], source = args[2], sink = args[3];
        Path mark = Path.of(args[5]);
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);

        StreamsBuilder builder = new StreamsBuilder();
        boolean[] marked = {false};
        builder.stream(source, Consumed.with(Serdes.String(), Serdes.String()))
            .mapValues(value -> {
                if (!marked[0]) {
                    marked[0] = true;
                    writeOnce(mark, Double.toString(System.currentTimeMillis() / 1000.0));
                }
                return parse(value);
            })
            .groupByKey()
            .count(Materialized.as("counts"))
            .toStream()
            .to(sink, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.setUncaughtExceptionHandler(error -> {
            error.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                .SHUTDOWN_APPLICATION;
        });
        streams.start();
        stopped.await();
    }

    private static JsonNode parse(String value) {
        try {
            return JSON.readTree(value);
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }

    /** The first writer in any process wins, as the Python contestants' marks. */
    private static void writeOnce(Path path, String text) {
        try {
            Files.writeString(path, text, StandardCharsets.UTF_8, StandardOpenOption.CREATE_NEW,
                              StandardOpenOption.WRITE);
        } catch (FileAlreadyExistsException ignored) {
            // another stream thread marked first
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }
}
