// A Kafka Streams 4.1 application against Skein, driven by tests/streams.rs:
//   ClickStream BOOTSTRAP STATE_DIR
// Topology (application id "clicks-app", at-least-once):
//   - clicks (key user, value "clickId,page") joined with the users table (key user,
//     value region): "region,page,clickId" to the enriched topic (a KTable-KStream
//     join);
//   - the clicks re-keyed by page (a repartition topic) and aggregated per page in
//     one-year tumbling windows into the set of click ids seen (a windowed
//     aggregation in a changelog-backed RocksDB store); each update goes to
//     page-counts as (page, distinct count). A set makes the count exact under
//     at-least-once: a click processed twice adds nothing.
// Prints "RUNNING" each time the instance reaches RUNNING and "RESTORED store n" when
// it restored n records of a store from its changelog.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.processor.StateRestoreListener;

public class ClickStream {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "clicks-app");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[1]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 500);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);

        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, String> users = builder.table("users");
        KStream<String, String> clicks = builder.stream("clicks");
        clicks.join(users, (click, region) -> {
            String[] parts = click.split(",");
            return region + "," + parts[1] + "," + parts[0];
        }).to("enriched");
        clicks.selectKey((user, click) -> click.split(",")[1])
            .groupByKey()
            .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofDays(365)))
            .aggregate(() -> "", (page, click, seen) -> {
                String id = click.split(",")[0];
                TreeSet<String> ids = new TreeSet<>(seen.isEmpty() ? List.of() : Arrays.asList(seen.split(";")));
                ids.add(id);
                return String.join(";", ids);
            }, Materialized.as("clicks-per-page"))
            .toStream()
            .map((window, seen) -> KeyValue.pair(window.key(), String.valueOf(seen.isEmpty() ? 0 : seen.split(";").length)))
            .to("page-counts");

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            public void onRestoreStart(TopicPartition partition, String store, long start, long end) {}
            public void onBatchRestored(TopicPartition partition, String store, long batchEnd, long count) {}
            public void onRestoreEnd(TopicPartition partition, String store, long total) {
                System.out.println("RESTORED " + store + " " + total);
            }
        });
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) System.out.println("RUNNING");
            if (now == KafkaStreams.State.ERROR) System.out.println("ERROR");
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("FAILED " + e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        Thread.currentThread().join();
    }
}
