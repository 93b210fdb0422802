// A Kafka Streams 4.4 word count against Skein, driven by tests/streams.rs:
//   WordCount BOOTSTRAP STATE_DIR GUARANTEE [GROUP_PROTOCOL]
// GUARANTEE is exactly_once_v2 or at_least_once; GROUP_PROTOCOL is classic (the
// default) or streams (KIP-1071, tasks assigned by the broker). Topology (application
// id "words-app-<guarantee>-<protocol>"): lines of "words" (one word per record value) re-keyed by
// word (a repartition topic), counted in a changelog-backed RocksDB store, each new
// count written to "word-counts-<guarantee>". Under exactly_once_v2 the last count of
// each word, read with read_committed, is exact however often the instance is killed.
// Prints "RUNNING" each time the instance reaches RUNNING.
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

public class WordCount {
    public static void main(String[] args) throws Exception {
        String guarantee = args[2];
        String protocol = args.length > 3 ? args[3] : "classic";
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "words-app-" + guarantee + "-" + protocol);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[1]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream("words")
            .selectKey((key, word) -> word)
            .groupByKey()
            .count(Materialized.as("word-store"))
            .toStream()
            .mapValues(String::valueOf)
            .to("word-counts-" + guarantee);

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) System.out.println("RUNNING");
            if (now == KafkaStreams.State.ERROR) System.out.println("ERROR");
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("FAILED " + e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        Thread.currentThread().join();
    }
}
