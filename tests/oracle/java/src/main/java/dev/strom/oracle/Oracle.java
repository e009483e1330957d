package dev.strom.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KGroupedTable;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.StateStore;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.kstream.ValueTransformerWithKey;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.ValueAndTimestamp;
import org.apache.kafka.streams.state.VersionedKeyValueStore;
import org.apache.kafka.streams.state.VersionedRecord;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.test.TestRecord;

/**
 * The oracle's reference runner: reads topology specs (one JSON object a line on stdin), builds each with
 * Kafka Streams' DSL, runs its input through TopologyTestDriver and writes one JSON result a line on
 * stdout: every record of the sink topics (bytes as base64) and the final contents of the named stores.
 * tests/oracle/spec.py documents the spec; tests/oracle/translate.py builds the same spec with strom.
 */
public final class Oracle {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    private static final String[] KEYS = {"a", "b", "c"};

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        System.setOut(new PrintStream(System.err, true, StandardCharsets.UTF_8));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode result;
            try {
                result = run(JSON.readTree(line));
            } catch (Throwable e) {
                result = F.objectNode();
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                result.put("error", e.getClass().getName() + ": " + e.getMessage());
                result.put("trace", trace.toString());
            }
            out.println(JSON.writeValueAsString(result));
        }
    }

    // ---- named functions (tests/oracle/functions.py is the same in Python) ----------------------------

    static Long num(Object v) {
        return (Long) v;
    }

    static boolean predicate(String fn, Object key, Object value) {
        Long v = num(value);
        switch (fn) {
            case "even": return v != null && Math.floorMod(v, 2L) == 0;
            case "gt5": return v != null && v > 5;
            case "key_a": return "a".equals(key);
            case "not_null": return v != null;
            default: throw new IllegalArgumentException("predicate " + fn);
        }
    }

    static Object mapValue(String fn, Object key, Object value) {
        Long v = num(value);
        if (v == null) {
            return null;
        }
        switch (fn) {
            case "inc": return v + 1;
            case "dbl": return v * 2;
            case "mod7": return Math.floorMod(v, 7L);
            case "keylen": return (long) (key == null ? -1 : ((String) key).length()) + v;
            default: throw new IllegalArgumentException("mapper " + fn);
        }
    }

    static String selectKey(String fn, Object key, Object value) {
        Long v = num(value);
        switch (fn) {
            case "vmod3": return v == null ? null : KEYS[(int) Math.floorMod(v, 3L)];
            case "same": return (String) key;
            case "const": return "a";
            case "next": return key == null ? "b" : KEYS[(java.util.Arrays.asList(KEYS).indexOf(key) + 1) % 3];
            case "vmod4none": return v == null || Math.floorMod(v, 4L) == 0 ? null : KEYS[(int) Math.floorMod(v, 3L)];
            default: throw new IllegalArgumentException("key selector " + fn);
        }
    }

    static List<Object> flatMap(String fn, Object value) {
        Long v = num(value);
        List<Object> out = new ArrayList<>();
        switch (fn) {
            case "dup":
                if (v != null) {
                    out.add(v);
                    out.add(v + 100);
                }
                return out;
            case "none":
                return out;
            default: throw new IllegalArgumentException("flat mapper " + fn);
        }
    }

    static Object reduce(String fn, Object aggregate, Object value) {
        Long a = num(aggregate);
        Long v = num(value);
        switch (fn) {
            case "sum": return a + v;
            case "max": return Math.max(a, v);
            case "latest": return v;
            case "sub": return a - v;
            default: throw new IllegalArgumentException("reducer " + fn);
        }
    }

    static Object join(String fn, Object left, Object right) {
        Long l = num(left);
        Long r = num(right);
        switch (fn) {
            case "lr": return (l == null ? 1000L : l) + 2 * (r == null ? 100000L : r);
            case "left": return l;
            default: throw new IllegalArgumentException("joiner " + fn);
        }
    }

    static Object cogroupAggregator(String fn, Object value, Object aggregate) {
        Long v = num(value);
        long weight;
        switch (fn) {
            case "add": weight = 1L; break;
            case "add10": weight = 10L; break;
            case "add100": weight = 100L; break;
            default: throw new IllegalArgumentException("cogroup aggregator " + fn);
        }
        return num(aggregate) + weight * (v == null ? 1000L : v);
    }

    static Serde<?> serde(String name) {
        switch (name) {
            case "String": case "Json": return Serdes.String();
            case "Long": return Serdes.Long();
            case "Integer": return Serdes.Integer();
            case "Double": return Serdes.Double();
            case "ByteArray": return Serdes.ByteArray();
            default: throw new IllegalArgumentException("serde " + name);
        }
    }

    // ---- processors and transformers (tests/oracle/functions.py is the same in Python) -----------------

    /** What a named processor does with a record: the store update and the records it forwards. */
    static List<Object[]> processRecord(String fn, KeyValueStore<String, Long> store, String key, Long value,
                                        boolean fixedKey) {
        List<Object[]> out = new ArrayList<>(); // {key, value, timestamp offset, added header}
        switch (fn) {
            case "running_sum": {
                if (key == null || value == null) {
                    out.add(new Object[] {key, value, 0L, false});
                    return out;
                }
                Long old = store.get(key);
                long total = (old == null ? 0L : old) + value;
                store.put(key, total);
                out.add(new Object[] {key, total, 0L, false});
                return out;
            }
            case "dedupe": {
                if (key == null) {
                    out.add(new Object[] {key, value, 0L, false});
                    return out;
                }
                Long old = store.get(key);
                if (value == null ? old != null : !value.equals(old)) {
                    store.put(key, value);
                    out.add(new Object[] {key, value, 0L, false});
                }
                return out;
            }
            case "buffer_then_punctuate":
                if (key != null) {
                    store.put(key, value);
                }
                return out;
            case "fanout":
                if (fixedKey) {
                    out.add(new Object[] {key, value == null ? null : value * 2, 0L, false});
                    out.add(new Object[] {key, null, 1L, true});
                } else {
                    out.add(new Object[] {selectKey("next", key, value), value, 0L, false});
                    out.add(new Object[] {null, value == null ? null : value + 1, 1L, true});
                }
                return out;
            default: throw new IllegalArgumentException("processor " + fn);
        }
    }

    /** The stored entries a punctuation forwards, in key order (deleted if the processor buffers). */
    static List<KeyValue<String, Long>> punctuateStore(String fn, KeyValueStore<String, Long> store) {
        List<KeyValue<String, Long>> entries = new ArrayList<>();
        try (KeyValueIterator<String, Long> it = store.all()) {
            it.forEachRemaining(entries::add);
        }
        if (fn.equals("buffer_then_punctuate")) {
            for (KeyValue<String, Long> e : entries) {
                store.delete(e.key);
            }
        }
        return entries;
    }

    static void schedule(JsonNode node, org.apache.kafka.streams.processor.api.ProcessingContext context,
                         org.apache.kafka.streams.processor.Punctuator punctuator) {
        JsonNode p = node.get("punctuate");
        if (p != null && !p.isNull()) {
            PunctuationType type = p.get("type").asText().equals("wall")
                    ? PunctuationType.WALL_CLOCK_TIME : PunctuationType.STREAM_TIME;
            context.schedule(ms(p, "interval"), type, punctuator);
        }
    }

    static final class NamedProcessor implements Processor<Object, Object, Object, Object> {
        private final JsonNode node;
        private final String fn;
        private ProcessorContext<Object, Object> context;
        private KeyValueStore<String, Long> store;

        NamedProcessor(JsonNode node) {
            this.node = node;
            this.fn = node.get("fn").asText();
        }

        @Override
        public void init(ProcessorContext<Object, Object> context) {
            this.context = context;
            if (node.hasNonNull("store")) {
                store = context.getStateStore(node.get("store").asText());
            }
            schedule(node, context, ts -> {
                for (KeyValue<String, Long> e : punctuateStore(fn, store)) {
                    context.forward(new Record<>(e.key, e.value, ts));
                }
            });
        }

        @Override
        public void process(Record<Object, Object> record) {
            for (Object[] o : processRecord(fn, store, (String) record.key(), (Long) record.value(), false)) {
                Record<Object, Object> r = record.withKey(o[0]).withValue(o[1])
                        .withTimestamp(record.timestamp() + (Long) o[2]);
                if ((Boolean) o[3]) {
                    r.headers().add("p", new byte[] {1});
                }
                context.forward(r);
            }
        }
    }

    static final class NamedFixedKeyProcessor implements FixedKeyProcessor<Object, Object, Object> {
        private final JsonNode node;
        private final String fn;
        private FixedKeyProcessorContext<Object, Object> context;
        private KeyValueStore<String, Long> store;
        private FixedKeyRecord<Object, Object> last;

        NamedFixedKeyProcessor(JsonNode node) {
            this.node = node;
            this.fn = node.get("fn").asText();
        }

        @Override
        public void init(FixedKeyProcessorContext<Object, Object> context) {
            this.context = context;
            if (node.hasNonNull("store")) {
                store = context.getStateStore(node.get("store").asText());
            }
            // a fixed-key processor forwards only records derived from one it received: the latest one,
            // carrying the sum of the stored values
            schedule(node, context, ts -> {
                long sum = 0;
                boolean any = false;
                for (KeyValue<String, Long> e : punctuateStore(fn, store)) {
                    sum += e.value;
                    any = true;
                }
                if (any && last != null) {
                    context.forward(last.withValue(sum).withTimestamp(ts));
                }
            });
        }

        @Override
        public void process(FixedKeyRecord<Object, Object> record) {
            last = record;
            for (Object[] o : processRecord(fn, store, (String) record.key(), (Long) record.value(), true)) {
                FixedKeyRecord<Object, Object> r = record.withValue(o[1])
                        .withTimestamp(record.timestamp() + (Long) o[2]);
                if ((Boolean) o[3]) {
                    r.headers().add("p", new byte[] {1});
                }
                context.forward(r);
            }
        }
    }

    static final class NamedTransformer implements ValueTransformerWithKey<Object, Object, Object> {
        private final String fn;
        private final String storeName;
        private org.apache.kafka.streams.processor.ProcessorContext context;
        private KeyValueStore<String, Long> store;

        NamedTransformer(String fn, String storeName) {
            this.fn = fn;
            this.storeName = storeName;
        }

        @Override
        public void init(org.apache.kafka.streams.processor.ProcessorContext context) {
            this.context = context;
            if (storeName != null) {
                store = context.getStateStore(storeName);
            }
        }

        @Override
        public Object transform(Object key, Object value) {
            Long v = (Long) value;
            switch (fn) {
                case "triple": return v == null ? null : v * 3;
                case "context": {
                    // the record context: a value getter's transformer sees a substitute (no topic, no headers)
                    int headers = context.headers().toArray().length;
                    return v == null ? null : v + (context.topic() == null ? 1000 : 0) + 10L * headers;
                }
                case "count_seen": {
                    Long seen = store.get((String) key);
                    long n = (seen == null ? 0L : seen) + 1;
                    store.put((String) key, n);
                    return v == null ? null : v * 10 + n;
                }
                default: throw new IllegalArgumentException("transformer " + fn);
            }
        }

        @Override
        public void close() {
        }
    }

    // ---- building ------------------------------------------------------------------------------------

    @SuppressWarnings({"unchecked", "rawtypes"})
    static <S extends StateStore> Materialized materialized(JsonNode node) {
        Materialized m = node.hasNonNull("store")
                ? Materialized.as(node.get("store").asText())
                : Materialized.with(null, null);
        if (node.has("versioned")) {
            m = Materialized.as(versionedStore(node));
        }
        if (node.has("caching")) {
            m = node.get("caching").asBoolean() ? m.withCachingEnabled() : m.withCachingDisabled();
        }
        if (node.has("key_serde")) {
            m = m.withKeySerde(serde(node.get("key_serde").asText()));
        }
        if (node.has("value_serde")) {
            m = m.withValueSerde(serde(node.get("value_serde").asText()));
        }
        return m;
    }

    /** A node's versioned store: {"store": name, "versioned": {"history": ms}}. */
    static org.apache.kafka.streams.state.VersionedBytesStoreSupplier versionedStore(JsonNode node) {
        return Stores.persistentVersionedKeyValueStore(node.get("store").asText(),
                ms(node.get("versioned"), "history"));
    }

    /** A versioned store's rows: [key, as_of or null, value, timestamp] for each of KEYS at the latest and
     * as of each of the store's "as_of" times; a key without a value there has no row. (No validTo: Kafka's
     * MeteredVersionedKeyValueStore.get leaves it out; docs/streams.md says strom gives it.) */
    static void versionedRows(VersionedKeyValueStore<Object, Object> store, JsonNode spec, ArrayNode rows) {
        for (String key : KEYS) {
            versionedRow(rows, key, null, store.get(key));
            for (JsonNode asOf : spec.path("as_of")) {
                versionedRow(rows, key, asOf.asLong(), store.get(key, asOf.asLong()));
            }
        }
    }

    static void versionedRow(ArrayNode rows, String key, Long asOf, VersionedRecord<Object> record) {
        if (record == null) {
            return;
        }
        ArrayNode row = rows.addArray().add(key);
        if (asOf == null) {
            row.addNull();
        } else {
            row.add(asOf);
        }
        row.add(render(record.value())).add(record.timestamp());
    }

    static Duration ms(JsonNode node, String field) {
        return Duration.ofMillis(node.get(field).asLong());
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static Object build(StreamsBuilder builder, JsonNode node, Map<String, Object> built) {
        String op = node.get("op").asText();
        Object in = node.has("in") ? built.get(node.get("in").asText()) : null;
        String fn = node.path("fn").asText(null);
        switch (op) {
            case "stream":
                return builder.stream(node.get("topic").asText(), Consumed.with(
                        serde(node.path("key_serde").asText("String")), serde(node.path("value_serde").asText("Long"))));
            case "table":
                return builder.table(node.get("topic").asText(), Consumed.with(
                        serde(node.path("key_serde").asText("String")), serde(node.path("value_serde").asText("Long"))),
                        materialized(node));
            case "filter":
            case "filter_not": {
                boolean not = op.equals("filter_not");
                if (in instanceof KStream) {
                    return not ? ((KStream) in).filterNot((k, v) -> predicate(fn, k, v))
                            : ((KStream) in).filter((k, v) -> predicate(fn, k, v));
                }
                KTable t = (KTable) in;
                if (node.hasNonNull("store")) {
                    return not ? t.filterNot((k, v) -> predicate(fn, k, v), materialized(node))
                            : t.filter((k, v) -> predicate(fn, k, v), materialized(node));
                }
                return not ? t.filterNot((k, v) -> predicate(fn, k, v)) : t.filter((k, v) -> predicate(fn, k, v));
            }
            case "map_values":
                if (in instanceof KStream) {
                    return ((KStream) in).mapValues((k, v) -> mapValue(fn, k, v));
                }
                if (node.hasNonNull("store")) {
                    return ((KTable) in).mapValues((k, v) -> mapValue(fn, k, v), materialized(node));
                }
                return ((KTable) in).mapValues((k, v) -> mapValue(fn, k, v));
            case "select_key":
                return ((KStream) in).selectKey((k, v) -> selectKey(fn, k, v));
            case "map":
                return ((KStream) in).map((k, v) -> KeyValue.pair(selectKey(fn, k, v), mapValue(node.get("value_fn").asText(), k, v)));
            case "flat_map_values":
                return ((KStream) in).flatMapValues(v -> flatMap(fn, v));
            case "merge":
                return ((KStream) in).merge((KStream) built.get(node.get("other").asText()));
            case "repartition":
                if (node.has("key_serde")) {
                    return ((KStream) in).repartition(org.apache.kafka.streams.kstream.Repartitioned.with(
                            serde(node.get("key_serde").asText()), serde(node.get("value_serde").asText())));
                }
                return ((KStream) in).repartition();
            case "split": {
                Map<String, KStream> branches = ((KStream) in).split(Named.as(node.get("name").asText()))
                        .branch((k, v) -> predicate(fn, k, v), Branched.as("x"))
                        .defaultBranch(Branched.as("y"));
                return branches.get(node.get("name").asText() + (node.get("branch").asInt() == 0 ? "x" : "y"));
            }
            case "to_table":
                return ((KStream) in).toTable(materialized(node));
            case "to_stream":
                return ((KTable) in).toStream();
            case "windowed_to_stream":
                return ((KTable<Windowed<String>, Object>) in).toStream().map((wk, v) -> KeyValue.pair(
                        wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v));
            case "group_by_key":
                return ((KStream) in).groupByKey();
            case "group_by":
                if (in instanceof KStream) {
                    return ((KStream) in).groupBy((k, v) -> selectKey(fn, k, v));
                }
                return ((KTable) in).groupBy((k, v) -> KeyValue.pair(selectKey(fn, k, v), v));
            case "windowed_by": {
                JsonNode w = node.get("window");
                KGroupedStream g = (KGroupedStream) in;
                Object windowed;
                switch (w.get("type").asText()) {
                    case "tumbling":
                        windowed = g.windowedBy(TimeWindows.ofSizeAndGrace(ms(w, "size"), ms(w, "grace")));
                        break;
                    case "hopping":
                        windowed = g.windowedBy(TimeWindows.ofSizeAndGrace(ms(w, "size"), ms(w, "grace"))
                                .advanceBy(ms(w, "advance")));
                        break;
                    case "sliding":
                        windowed = g.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(ms(w, "size"), ms(w, "grace")));
                        break;
                    case "session":
                        windowed = g.windowedBy(SessionWindows.ofInactivityGapAndGrace(ms(w, "size"), ms(w, "grace")));
                        break;
                    default: throw new IllegalArgumentException("window " + w);
                }
                if (node.path("emit").asText("update").equals("close")) {
                    if (windowed instanceof TimeWindowedKStream) {
                        windowed = ((TimeWindowedKStream) windowed).emitStrategy(EmitStrategy.onWindowClose());
                    } else {
                        windowed = ((SessionWindowedKStream) windowed).emitStrategy(EmitStrategy.onWindowClose());
                    }
                }
                return windowed;
            }
            case "count":
                if (in instanceof KGroupedStream) {
                    return ((KGroupedStream) in).count(materialized(node));
                }
                if (in instanceof KGroupedTable) {
                    return ((KGroupedTable) in).count(materialized(node));
                }
                if (in instanceof TimeWindowedKStream) {
                    return ((TimeWindowedKStream) in).count(materialized(node));
                }
                return ((SessionWindowedKStream) in).count(materialized(node));
            case "reduce": {
                String sub = node.path("subtractor").asText("sub");
                if (in instanceof KGroupedStream) {
                    return ((KGroupedStream) in).reduce((a, v) -> reduce(fn, a, v), materialized(node));
                }
                if (in instanceof KGroupedTable) {
                    return ((KGroupedTable) in).reduce((a, v) -> reduce(fn, a, v), (a, v) -> reduce(sub, a, v),
                            materialized(node));
                }
                if (in instanceof TimeWindowedKStream) {
                    return ((TimeWindowedKStream) in).reduce((a, v) -> reduce(fn, a, v), materialized(node));
                }
                return ((SessionWindowedKStream) in).reduce((a, v) -> reduce(fn, a, v), materialized(node));
            }
            case "aggregate": {
                String sub = node.path("subtractor").asText("sub");
                if (in instanceof KGroupedStream) {
                    return ((KGroupedStream) in).aggregate(() -> 0L, (k, v, a) -> reduce(fn, a, v), materialized(node));
                }
                if (in instanceof KGroupedTable) {
                    return ((KGroupedTable) in).aggregate(() -> 0L, (k, v, a) -> reduce(fn, a, v),
                            (k, v, a) -> reduce(sub, a, v), materialized(node));
                }
                if (in instanceof TimeWindowedKStream) {
                    return ((TimeWindowedKStream) in).aggregate(() -> 0L, (k, v, a) -> reduce(fn, a, v),
                            materialized(node));
                }
                return ((SessionWindowedKStream) in).aggregate(() -> 0L, (k, v, a) -> reduce(fn, a, v),
                        (k, a1, a2) -> reduce("sum", a1, a2), materialized(node));
            }
            case "suppress": {
                KTable t = (KTable) in;
                if (node.get("kind").asText().equals("until_window_closes")) {
                    return t.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
                }
                Suppressed.BufferConfig buffer = node.hasNonNull("max_records")
                        ? Suppressed.BufferConfig.maxRecords(node.get("max_records").asLong()).emitEarlyWhenFull()
                        : Suppressed.BufferConfig.unbounded();
                return t.suppress(Suppressed.untilTimeLimit(ms(node, "time_limit"), buffer));
            }
            case "join": {
                Object other = built.get(node.get("other").asText());
                String kind = node.get("kind").asText();
                if (in instanceof KStream && other instanceof KStream) {
                    JsonNode w = node.get("window");
                    JoinWindows jw = JoinWindows.ofTimeDifferenceAndGrace(ms(w, "size"), ms(w, "grace"));
                    KStream l = (KStream) in;
                    KStream r = (KStream) other;
                    switch (kind) {
                        case "inner": return l.join(r, (a, b) -> join(fn, a, b), jw);
                        case "left": return l.leftJoin(r, (a, b) -> join(fn, a, b), jw);
                        case "outer": return l.outerJoin(r, (a, b) -> join(fn, a, b), jw);
                        default: throw new IllegalArgumentException(kind);
                    }
                }
                if (in instanceof KStream) {
                    KStream l = (KStream) in;
                    KTable r = (KTable) other;
                    return kind.equals("left") ? l.leftJoin(r, (a, b) -> join(fn, a, b))
                            : l.join(r, (a, b) -> join(fn, a, b));
                }
                KTable l = (KTable) in;
                KTable r = (KTable) other;
                if (node.hasNonNull("store")) {
                    switch (kind) {
                        case "inner": return l.join(r, (a, b) -> join(fn, a, b), materialized(node));
                        case "left": return l.leftJoin(r, (a, b) -> join(fn, a, b), materialized(node));
                        case "outer": return l.outerJoin(r, (a, b) -> join(fn, a, b), materialized(node));
                        default: throw new IllegalArgumentException(kind);
                    }
                }
                switch (kind) {
                    case "inner": return l.join(r, (a, b) -> join(fn, a, b));
                    case "left": return l.leftJoin(r, (a, b) -> join(fn, a, b));
                    case "outer": return l.outerJoin(r, (a, b) -> join(fn, a, b));
                    default: throw new IllegalArgumentException(kind);
                }
            }
            case "join_grace": {
                // a stream-table join whose records wait for late table updates (KIP-923; versioned tables)
                KStream l = (KStream) in;
                KTable r = (KTable) built.get(node.get("other").asText());
                org.apache.kafka.streams.kstream.Joined joined = org.apache.kafka.streams.kstream.Joined
                        .with(null, null, null).withGracePeriod(ms(node, "grace"));
                return node.get("kind").asText().equals("left") ? l.leftJoin(r, (a, b) -> join(fn, a, b), joined)
                        : l.join(r, (a, b) -> join(fn, a, b), joined);
            }
            case "fk_join": {
                KTable l = (KTable) in;
                KTable r = (KTable) built.get(node.get("other").asText());
                String fkFn = node.path("fk").asText("vmod3");
                java.util.function.Function<Object, Object> fk = v -> selectKey(fkFn, null, v);
                if (node.get("kind").asText().equals("left")) {
                    return l.leftJoin(r, fk, (a, b) -> join(fn, a, b), materialized(node));
                }
                return l.join(r, fk, (a, b) -> join(fn, a, b), materialized(node));
            }
            case "named_group_by": {
                // a cogroup's input: Kafka Streams 4.1.1 names every unnamed input's repartition topic
                // after the cogroup's store, so two inputs that repartition clash unless named
                Grouped grouped = Grouped.as(node.get("name").asText());
                if (fn == null) {
                    return ((KStream) in).groupByKey(grouped);
                }
                return ((KStream) in).groupBy((k, v) -> selectKey(fn, k, v), grouped);
            }
            case "cogroup":
                return cogroup(node, built);
            case "global_table":
                // Kafka Streams 4.1.1 makes no store for an unnamed Materialized here: name it or give none
                if (node.hasNonNull("store")) {
                    return builder.globalTable(node.get("topic").asText(), Consumed.with(Serdes.String(), Serdes.Long()),
                            materialized(node));
                }
                return builder.globalTable(node.get("topic").asText(), Consumed.with(Serdes.String(), Serdes.Long()));
            case "global_join": {
                KStream l = (KStream) in;
                GlobalKTable g = (GlobalKTable) built.get(node.get("other").asText());
                String keyFn = node.get("key_fn").asText();
                if (node.get("kind").asText().equals("left")) {
                    return l.leftJoin(g, (k, v) -> selectKey(keyFn, k, v), (a, b) -> join(fn, a, b));
                }
                return l.join(g, (k, v) -> selectKey(keyFn, k, v), (a, b) -> join(fn, a, b));
            }
            case "state_store": {
                String name = node.get("name").asText();
                var supplier = node.get("persistent").asBoolean()
                        ? Stores.persistentKeyValueStore(name) : Stores.inMemoryKeyValueStore(name);
                var storeBuilder = Stores.keyValueStoreBuilder(supplier, Serdes.String(), Serdes.Long());
                builder.addStateStore(node.get("caching").asBoolean()
                        ? storeBuilder.withCachingEnabled() : storeBuilder.withCachingDisabled());
                return null;
            }
            case "process": {
                String[] stores = node.hasNonNull("store") ? new String[] {node.get("store").asText()} : new String[0];
                if (node.path("fixed_key").asBoolean()) {
                    return ((KStream) in).processValues(() -> new NamedFixedKeyProcessor(node), stores);
                }
                return ((KStream) in).process(() -> new NamedProcessor(node), stores);
            }
            case "transform_values": {
                String store = node.path("transformer_store").asText(null);
                String[] stores = store == null ? new String[0] : new String[] {store};
                KTable t = (KTable) in;
                if (node.hasNonNull("store")) {
                    return t.transformValues(() -> new NamedTransformer(fn, store), materialized(node), stores);
                }
                return t.transformValues(() -> new NamedTransformer(fn, store), stores);
            }
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    /** KGroupedStream.cogroup of the node's grouped "inputs", each with its aggregator of "fns", then
     * aggregate, per window when the node has a "window". */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static KTable cogroup(JsonNode node, Map<String, Object> built) {
        CogroupedKStream c = null;
        for (int i = 0; i < node.get("inputs").size(); i++) {
            KGroupedStream g = (KGroupedStream) built.get(node.get("inputs").get(i).asText());
            String agg = node.get("fns").get(i).asText();
            Aggregator a = (k, v, acc) -> cogroupAggregator(agg, v, acc);
            c = c == null ? g.cogroup(a) : c.cogroup(g, a);
        }
        if (!node.has("window")) {
            return c.aggregate(() -> 0L, materialized(node));
        }
        JsonNode w = node.get("window");
        switch (w.get("type").asText()) {
            case "tumbling":
                return c.windowedBy(TimeWindows.ofSizeAndGrace(ms(w, "size"), ms(w, "grace")))
                        .aggregate(() -> 0L, materialized(node));
            case "hopping":
                return c.windowedBy(TimeWindows.ofSizeAndGrace(ms(w, "size"), ms(w, "grace")).advanceBy(ms(w, "advance")))
                        .aggregate(() -> 0L, materialized(node));
            case "sliding":
                return c.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(ms(w, "size"), ms(w, "grace")))
                        .aggregate(() -> 0L, materialized(node));
            case "session":
                return c.windowedBy(SessionWindows.ofInactivityGapAndGrace(ms(w, "size"), ms(w, "grace")))
                        .aggregate(() -> 0L, (k, a1, a2) -> reduce("sum", a1, a2), materialized(node));
            default: throw new IllegalArgumentException("window " + w);
        }
    }

    // ---- running -------------------------------------------------------------------------------------

    static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    static JsonNode b64(byte[] data) {
        return data == null ? F.nullNode() : F.textNode(Base64.getEncoder().encodeToString(data));
    }

    static JsonNode render(Object value) {
        if (value == null) {
            return F.nullNode();
        }
        if (value instanceof ValueAndTimestamp) {
            return render(((ValueAndTimestamp<?>) value).value());
        }
        if (value instanceof Long || value instanceof Integer) {
            return F.numberNode(((Number) value).longValue());
        }
        if (value instanceof Double) {
            ObjectNode d = F.objectNode();
            d.put("double_bits", Double.doubleToLongBits((Double) value));
            return d;
        }
        if (value instanceof String) {
            return F.textNode((String) value);
        }
        if (value instanceof byte[]) {
            ObjectNode b = F.objectNode();
            b.set("bytes", b64((byte[]) value));
            return b;
        }
        throw new IllegalArgumentException("cannot render " + value.getClass());
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static ObjectNode run(JsonNode spec) throws Exception {
        Path stateDir = Files.createTempDirectory("strom-oracle-");
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "oracle");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.LongSerde.class.getName());
        // Look for closed windows at every record, as strom does, not at most once a wall-clock second.
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, 0L);
        spec.path("props").fields().forEachRemaining(e -> props.put(e.getKey(), e.getValue().asText()));

        StreamsBuilder builder = new StreamsBuilder();
        Map<String, Object> built = new HashMap<>();
        for (JsonNode node : spec.get("nodes")) {
            built.put(node.get("id").asText(), build(builder, node, built));
        }
        for (JsonNode sink : spec.get("sinks")) {
            Object from = built.get(sink.get("in").asText());
            KStream stream = from instanceof KTable ? ((KTable) from).toStream() : (KStream) from;
            stream.to(sink.get("topic").asText(), Produced.with(
                    serde(sink.path("key_serde").asText("String")), serde(sink.path("value_serde").asText("Long"))));
        }
        Topology topology = builder.build(props);

        ObjectNode result = F.objectNode();
        try (TopologyTestDriver driver = spec.has("wall_clock")
                ? new TopologyTestDriver(topology, props, java.time.Instant.ofEpochMilli(spec.get("wall_clock").asLong()))
                : new TopologyTestDriver(topology, props)) {
            Map<String, TestInputTopic<byte[], byte[]>> inputs = new HashMap<>();
            for (JsonNode record : spec.get("input")) {
                if (record.has("advance")) {
                    driver.advanceWallClockTime(Duration.ofMillis(record.get("advance").asLong()));
                    continue;
                }
                String topic = record.get("topic").asText();
                TestInputTopic<byte[], byte[]> input = inputs.computeIfAbsent(topic, t -> driver.createInputTopic(
                        t, new ByteArraySerializer(), new ByteArraySerializer()));
                RecordHeaders headers = new RecordHeaders();
                for (JsonNode h : record.path("headers")) {
                    headers.add(h.get(0).asText(), bytes(h.get(1)));
                }
                input.pipeInput(new TestRecord<>(bytes(record.get("key")), bytes(record.get("value")), headers,
                        record.get("ts").asLong()));
            }
            ObjectNode outputs = result.putObject("outputs");
            for (JsonNode sink : spec.get("sinks")) {
                String topic = sink.get("topic").asText();
                TestOutputTopic<byte[], byte[]> output = driver.createOutputTopic(
                        topic, new ByteArrayDeserializer(), new ByteArrayDeserializer());
                ArrayNode records = outputs.putArray(topic);
                for (TestRecord<byte[], byte[]> r : output.readRecordsToList()) {
                    ObjectNode o = records.addObject();
                    o.set("key", b64(r.key()));
                    o.set("value", b64(r.value()));
                    o.put("ts", r.timestamp());
                    ArrayNode hs = o.putArray("headers");
                    for (Header h : r.headers()) {
                        hs.addArray().add(h.key()).add(b64(h.value()));
                    }
                }
            }
            ObjectNode stores = result.putObject("stores");
            for (JsonNode store : spec.path("stores")) {
                String name = store.get("name").asText();
                ArrayNode rows = stores.putArray(name);
                switch (store.get("kind").asText()) {
                    case "kv": {
                        KeyValueStore<Object, Object> kv = driver.getKeyValueStore(name);
                        try (KeyValueIterator<Object, Object> it = kv.all()) {
                            it.forEachRemaining(e -> rows.addArray().add(render(e.key)).add(render(e.value)));
                        }
                        break;
                    }
                    case "window": {
                        WindowStore<Object, Object> ws = driver.getWindowStore(name);
                        try (KeyValueIterator<Windowed<Object>, Object> it = ws.all()) {
                            it.forEachRemaining(e -> rows.addArray().add(render(e.key.key()))
                                    .add(e.key.window().start()).add(e.key.window().end()).add(render(e.value)));
                        }
                        break;
                    }
                    case "session": {
                        SessionStore<Object, Object> ss = driver.getSessionStore(name);
                        for (String key : KEYS) {
                            try (KeyValueIterator<Windowed<Object>, Object> it = ss.fetch(key)) {
                                it.forEachRemaining(e -> rows.addArray().add(render(e.key.key()))
                                        .add(e.key.window().start()).add(e.key.window().end()).add(render(e.value)));
                            }
                        }
                        break;
                    }
                    case "versioned":
                        versionedRows(driver.getVersionedKeyValueStore(name), store, rows);
                        break;
                    default: throw new IllegalArgumentException("store kind " + store);
                }
            }
        } finally {
            deleteTree(stateDir);
        }
        return result;
    }

    static void deleteTree(Path root) throws java.io.IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (var paths = Files.walk(root)) {
            for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }

    private Oracle() {
    }
}
