// The Java Kafka client against Skein, driven by tests/java_clients.rs:
//   produce BOOTSTRAP TOPIC COUNT
//   member BOOTSTRAP TOPIC GROUP PROTOCOL EXPECT MAX_SECONDS
//   assigned BOOTSTRAP TOPIC PARTITIONS SECONDS (polls every partition, no group)
//   paced BOOTSTRAP TOPIC COUNT PAUSE_MS (idempotent, acks=all, values m00000...;
//     prints "ACKED n FAILED m" once every send completed)
//   describe BOOTSTRAP TOPIC (Admin.describeTopics: "PARTITION p leader=L isr=a,b elr=c"
//     per partition)
//   quorum BOOTSTRAP (Admin.describeMetadataQuorum: "QUORUM leader=N hw=H voters=a,b,c
//     caught-up=k", k the voters at the high watermark)
// A member prints "ASSIGNED p,p,..." on every assignment change, "FIRST value" for
// its first record, commits after each poll, and exits after EXPECT records (0: runs
// MAX_SECONDS) printing "RECORDS n".
import java.time.Duration;
import java.util.*;
import java.util.stream.Collectors;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class Client {
    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1];
        if (mode.equals("quorum")) {
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
                QuorumInfo quorum = admin.describeMetadataQuorum().quorumInfo().get();
                String voters = quorum.voters().stream().map(v -> String.valueOf(v.replicaId())).sorted()
                        .collect(Collectors.joining(","));
                long caughtUp = quorum.voters().stream()
                        .filter(v -> v.logEndOffset() == quorum.highWatermark()).count();
                System.out.println("QUORUM leader=" + quorum.leaderId() + " hw=" + quorum.highWatermark()
                        + " voters=" + voters + " caught-up=" + caughtUp);
            }
            return;
        }
        String topic = args[2];
        if (mode.equals("describe")) {
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
                var description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                for (var p : description.partitions()) {
                    String isr = p.isr().stream().map(n -> String.valueOf(n.id())).collect(Collectors.joining(","));
                    String elr = p.elr().stream().map(n -> String.valueOf(n.id())).collect(Collectors.joining(","));
                    int leader = p.leader() == null ? -1 : p.leader().id();
                    System.out.println("PARTITION " + p.partition() + " leader=" + leader + " isr=" + isr + " elr=" + elr);
                }
            }
            return;
        }
        if (mode.equals("paced")) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("acks", "all");
            p.put("enable.idempotence", "true");
            p.put("linger.ms", "2");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            int count = Integer.parseInt(args[3]);
            long pause = Long.parseLong(args[4]);
            AtomicInteger acked = new AtomicInteger(), failed = new AtomicInteger();
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(topic, String.format("m%05d", i)), (meta, error) -> {
                        if (error == null) acked.incrementAndGet(); else failed.incrementAndGet();
                    });
                    if (pause > 0 && i % 10 == 9) Thread.sleep(pause);
                }
                producer.flush();
            }
            System.out.println("ACKED " + acked.get() + " FAILED " + failed.get());
            return;
        }
        if (mode.equals("produce")) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("acks", "all");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            int count = Integer.parseInt(args[3]);
            int start = args.length > 4 ? Integer.parseInt(args[4]) : 0;
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = start; i < start + count; i++) producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
                producer.flush();
            }
            System.out.println("PRODUCED " + count);
            return;
        }
        if (mode.equals("assigned")) {
            Properties c = new Properties();
            c.put("bootstrap.servers", bootstrap);
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            c.put("fetch.max.wait.ms", "100");
            int partitions = Integer.parseInt(args[3]);
            long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(args[4]);
            int records = 0;
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                List<TopicPartition> all = new ArrayList<>();
                for (int p = 0; p < partitions; p++) all.add(new TopicPartition(topic, p));
                consumer.assign(all);
                consumer.seekToBeginning(all);
                while (System.currentTimeMillis() < deadline) records += consumer.poll(Duration.ofMillis(100)).count();
            }
            System.out.println("RECORDS " + records);
            return;
        }
        String group = args[3], protocol = args[4];
        int expect = Integer.parseInt(args[5]);
        long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(args[6]);
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", protocol);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        if (protocol.equals("classic")) {
            c.put("session.timeout.ms", "6000");
            c.put("heartbeat.interval.ms", "500");
        }
        int records = 0;
        String last = "";
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            while (System.currentTimeMillis() < deadline && (expect == 0 || records < expect)) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                String now = consumer.assignment().stream().map(TopicPartition::partition).sorted()
                        .map(String::valueOf).collect(Collectors.joining(","));
                if (!now.equals(last)) {
                    System.out.println("ASSIGNED " + now);
                    last = now;
                }
                for (ConsumerRecord<String, String> r : batch) {
                    if (records == 0) System.out.println("FIRST " + r.value());
                    records++;
                }
                if (!batch.isEmpty()) consumer.commitSync();
            }
        }
        System.out.println("RECORDS " + records);
    }
}
