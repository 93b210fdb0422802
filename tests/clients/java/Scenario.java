// The client scenario of tests/clients.rs for the Java Kafka client (3.x and 4.x):
//   java -cp <kafka-clients classpath> Scenario.java BOOTSTRAP PREFIX
// Admin (create, delete, describe configs), an idempotent producer, list offsets
// (earliest, latest, by time), consume from the beginning and from an offset, and a
// 2-member consumer group with commits. Prints "OK java <version>" or fails.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class Scenario {
    static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("FAILED: " + what);
            System.exit(1);
        }
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        if (group != null) c.put("group.id", group);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("session.timeout.ms", "10000");
        c.put("heartbeat.interval.ms", "500");
        return c;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        String topic = prefix + "-t", tmp = prefix + "-tmp", group = prefix + "-g";
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        a.put("request.timeout.ms", "15000");
        a.put("default.api.timeout.ms", "20000");
        try (Admin admin = Admin.create(a)) {
            // Admin: create, delete, describe configs.
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1), new NewTopic(tmp, 1, (short) 1))).all().get();
            admin.deleteTopics(List.of(tmp)).all().get();
            long until = System.currentTimeMillis() + 10_000;
            Set<String> names = admin.listTopics().names().get();
            while (names.contains(tmp) && System.currentTimeMillis() < until) {
                Thread.sleep(100);
                names = admin.listTopics().names().get();
            }
            check(names.contains(topic) && !names.contains(tmp), "topics after delete: " + names);
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            check("delete".equals(config.get("cleanup.policy").value()), "cleanup.policy " + config.get("cleanup.policy"));
            check(config.get("retention.ms") != null, "retention.ms missing");

            // Idempotent producer.
            long t0 = System.currentTimeMillis();
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("acks", "all");
            p.put("enable.idempotence", "true");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < 100; i++) sent.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
                producer.flush();
                for (Future<RecordMetadata> f : sent) f.get();
            }

            // List offsets: earliest, latest, by time.
            List<TopicPartition> partitions = List.of(0, 1, 2).stream().map(i -> new TopicPartition(topic, i)).collect(Collectors.toList());
            Map<TopicPartition, OffsetSpec> earliest = new HashMap<>(), latest = new HashMap<>(), byTime = new HashMap<>();
            for (TopicPartition tp : partitions) {
                earliest.put(tp, OffsetSpec.earliest());
                latest.put(tp, OffsetSpec.latest());
                byTime.put(tp, OffsetSpec.forTimestamp(t0));
            }
            var first = admin.listOffsets(earliest).all().get();
            var end = admin.listOffsets(latest).all().get();
            var timed = admin.listOffsets(byTime).all().get();
            long total = 0;
            for (TopicPartition tp : partitions) {
                total += end.get(tp).offset() - first.get(tp).offset();
                if (end.get(tp).offset() > 0) check(timed.get(tp).offset() == first.get(tp).offset(), "offset by time of " + tp + ": " + timed.get(tp));
            }
            check(total == 100, "latest - earliest = " + total);

            // Consume from the beginning, without a group.
            Map<String, String> seen = new HashMap<>();
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, null))) {
                consumer.assign(partitions);
                consumer.seekToBeginning(partitions);
                long deadline = System.currentTimeMillis() + 30_000;
                while (seen.size() < 100 && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) seen.put(r.key(), r.value());
                }
                check(seen.size() == 100, "consumed " + seen.size() + " of 100");
                for (int i = 0; i < 100; i++) check(("v" + i).equals(seen.get("k" + i)), "record k" + i);
                // From an offset: the last record of a partition with two or more.
                TopicPartition busy = partitions.stream().filter(tp -> end.get(tp).offset() >= 2).findFirst().get();
                consumer.assign(List.of(busy));
                consumer.seek(busy, end.get(busy).offset() - 1);
                List<ConsumerRecord<String, String>> got = new ArrayList<>();
                while (got.isEmpty() && System.currentTimeMillis() < deadline) consumer.poll(Duration.ofMillis(200)).forEach(got::add);
                check(got.size() == 1 && got.get(0).offset() == end.get(busy).offset() - 1, "seek gave " + got);
            }

            // A 2-member group, committing what it consumed.
            Set<String> keys = ConcurrentHashMap.newKeySet();
            Set<Integer> owners = ConcurrentHashMap.newKeySet();
            CountDownLatch done = new CountDownLatch(2);
            List<Thread> members = new ArrayList<>();
            for (int m = 0; m < 2; m++) {
                final int member = m;
                Thread t = new Thread(() -> {
                    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
                        consumer.subscribe(List.of(topic));
                        long deadline = System.currentTimeMillis() + 45_000;
                        // Poll until the group has consumed everything, committing each batch.
                        while (keys.size() < 100 && System.currentTimeMillis() < deadline) {
                            ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                            Set<TopicPartition> assigned = consumer.assignment();
                            if (assigned.size() == 3) {
                                // Alone in the group: wait for the other member, giving
                                // back what this poll fetched.
                                for (TopicPartition tp : batch.partitions()) consumer.seek(tp, batch.records(tp).get(0).offset());
                                consumer.pause(assigned);
                                continue;
                            }
                            if (assigned.isEmpty()) continue;
                            owners.add(member);
                            consumer.resume(consumer.paused());
                            for (ConsumerRecord<String, String> r : batch) check(keys.add(r.key()), "delivered twice: " + r.key());
                            if (!batch.isEmpty()) consumer.commitSync();
                        }
                        done.countDown();
                        // Stay in the group until both are done, so the split holds.
                        done.await(20, TimeUnit.SECONDS);
                        consumer.commitSync();
                    } catch (Exception e) {
                        e.printStackTrace();
                        System.exit(1);
                    }
                });
                t.start();
                members.add(t);
                if (m == 0) Thread.sleep(300);
            }
            for (Thread t : members) t.join();
            check(keys.size() == 100, "group consumed " + keys.size() + " of 100");
            check(owners.size() == 2, "members that shared the partitions: " + owners);
            var committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            for (TopicPartition tp : partitions) {
                long at = committed.containsKey(tp) ? committed.get(tp).offset() : 0;
                check(at == end.get(tp).offset(), "committed " + tp + " at " + at + ", end " + end.get(tp).offset());
            }
        }
        System.out.println("OK java " + clientVersion());
    }

    /** The client's version, from AppInfoParser, which moved in 4.4 (to `internals`). */
    static String clientVersion() throws Exception {
        for (String name : new String[] {"org.apache.kafka.common.utils.AppInfoParser",
                "org.apache.kafka.common.utils.internals.AppInfoParser"}) {
            try {
                return (String) Class.forName(name).getMethod("getVersion").invoke(null);
            } catch (ClassNotFoundException e) {
                // The other name.
            }
        }
        return "unknown";
    }
}
