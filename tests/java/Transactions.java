// The Java Kafka client's transactions (KIP-98, KIP-447, KIP-890), driven by
// tests/transactions.rs; every subcommand prints one fact per line, then exits 0:
//   produce-txn BOOTSTRAP TOPIC TXN_ID N_TXNS PER_TXN ABORT_EVERY
//     transaction i sends "TXN_ID-i-j" (key "k<j>") for j < PER_TXN; every ABORT_EVERY-th
//     (i % ABORT_EVERY == ABORT_EVERY - 1; 0: none) is aborted, the rest committed.
//     Prints "COMMITTED i" or "ABORTED i" per transaction, then
//     "DONE committed=C aborted=A".
//   produce-plain BOOTSTRAP TOPIC COUNT (idempotent, not transactional: "in-i", key "k<i>")
//     prints "PRODUCED COUNT"
//   consume BOOTSTRAP TOPIC read_committed|read_uncommitted MAX_IDLE_MS
//     reads every partition from the start (no group) until its position reaches the end
//     offset that the isolation level sees (the LSO for read_committed), or nothing came
//     for MAX_IDLE_MS ("IDLE"); prints each value, then "END p=<end offset>" and
//     "POSITION p=<position>" per partition and "COUNT n".
//   read-process-write BOOTSTRAP IN_TOPIC OUT_TOPIC GROUP TXN_ID COUNT ABORT_FIRST MAX_SECONDS
//     a read_committed group consumer (auto commit off) and a transactional producer:
//     each polled batch becomes one transaction writing "out-<value>" to OUT_TOPIC and the
//     batch's offsets through sendOffsetsToTransaction(offsets, groupMetadata()). With
//     ABORT_FIRST=1 the first transaction is aborted and the consumer rewinds to the
//     committed offsets. Prints "TXN n records=r committed|aborted" and "PROCESSED COUNT".
//   committed BOOTSTRAP TOPIC GROUP
//     prints "COMMITTED p=<offset>" (the group's, -1 if none) and "END p=<log end offset>".
//   hang BOOTSTRAP TOPIC TXN_ID COUNT TIMEOUT_MS
//     begins a transaction (transaction.timeout.ms=TIMEOUT_MS), sends "hung-j" for j < COUNT,
//     flushes, prints "READY" and sleeps until killed.
//   zombie BOOTSTRAP TOPIC TXN_ID send|commit
//     producer A begins a transaction and sends "zombie-0"; producer B, same TXN_ID,
//     initTransactions() (fencing A), sends "fresh-0" and commits; A then (send) sends
//     "zombie-1" and commits, or (commit) only commits. Prints "B COMMITTED" and
//     "A FENCED <exception class>" (or "A COMMITTED", which would be a bug).
//   describe BOOTSTRAP TOPIC TXN_ID
//     Admin.describeTransactions: "TXN state=<state> producer=<id> epoch=<e> timeout=<ms>
//     partitions=<topic-p,...>"; Admin.listTransactions: "LISTED state=<state>" (or
//     "LISTED none"); Admin.describeProducers, per partition of TOPIC and active producer:
//     "PRODUCER <p> producer=<id> epoch=<e> txn-start=<first offset of its open
//     transaction, -1 if none>".
// Failures print "ERROR <exception>" to stderr and exit 1.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class Transactions {
    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Throwable error) {
            System.out.flush();
            System.err.println("ERROR " + error);
            error.printStackTrace();
            System.exit(1);
        }
        System.out.flush();
        // A client's threads can outlive close(); exit at once.
        System.exit(0);
    }

    static void run(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        switch (mode) {
            case "produce-txn" -> produceTxn(bootstrap, topic, args[3], Integer.parseInt(args[4]),
                    Integer.parseInt(args[5]), Integer.parseInt(args[6]));
            case "produce-plain" -> producePlain(bootstrap, topic, Integer.parseInt(args[3]));
            case "consume" -> consume(bootstrap, topic, args[3], Long.parseLong(args[4]));
            case "read-process-write" -> readProcessWrite(bootstrap, topic, args[3], args[4], args[5],
                    Integer.parseInt(args[6]), args[7].equals("1"), Long.parseLong(args[8]));
            case "committed" -> committed(bootstrap, topic, args[3]);
            case "hang" -> hang(bootstrap, topic, args[3], Integer.parseInt(args[4]), args[5]);
            case "describe" -> describe(bootstrap, topic, args[3]);
            case "zombie" -> zombie(bootstrap, topic, args[3], args[4].equals("send"));
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static Properties producerConfig(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "5");
        p.put("max.block.ms", "30000");
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "10000");
        if (txnId != null) p.put("transactional.id", txnId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return p;
    }

    static Properties consumerConfig(String bootstrap, String isolation) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", isolation);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("fetch.max.wait.ms", "100");
        c.put("request.timeout.ms", "10000");
        c.put("default.api.timeout.ms", "30000");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return c;
    }

    static void produceTxn(String bootstrap, String topic, String txnId, int txns, int perTxn, int abortEvery) {
        int committed = 0, aborted = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerConfig(bootstrap, txnId))) {
            producer.initTransactions();
            for (int i = 0; i < txns; i++) {
                producer.beginTransaction();
                for (int j = 0; j < perTxn; j++) producer.send(new ProducerRecord<>(topic, "k" + j, txnId + "-" + i + "-" + j));
                if (abortEvery > 0 && i % abortEvery == abortEvery - 1) {
                    // Flushed first, so the aborted records are in the log for read_uncommitted.
                    producer.flush();
                    producer.abortTransaction();
                    System.out.println("ABORTED " + i);
                    aborted++;
                } else {
                    producer.commitTransaction();
                    System.out.println("COMMITTED " + i);
                    committed++;
                }
            }
        }
        System.out.println("DONE committed=" + committed + " aborted=" + aborted);
    }

    static void producePlain(String bootstrap, String topic, int count) {
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerConfig(bootstrap, null))) {
            for (int i = 0; i < count; i++) producer.send(new ProducerRecord<>(topic, "k" + i, "in-" + i));
            producer.flush();
        }
        System.out.println("PRODUCED " + count);
    }

    static List<TopicPartition> partitions(Consumer<?, ?> consumer, String topic) {
        List<TopicPartition> all = new ArrayList<>();
        for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
            all.add(new TopicPartition(topic, info.partition()));
        }
        all.sort(Comparator.comparingInt(TopicPartition::partition));
        return all;
    }

    static void consume(String bootstrap, String topic, String isolation, long maxIdleMs) {
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig(bootstrap, isolation))) {
            List<TopicPartition> all = partitions(consumer, topic);
            consumer.assign(all);
            consumer.seekToBeginning(all);
            // For read_committed, ListOffsets answers the last stable offset.
            Map<TopicPartition, Long> end = consumer.endOffsets(all);
            long count = 0, lastRecord = System.currentTimeMillis();
            while (true) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> r : batch) {
                    System.out.println(r.value());
                    count++;
                }
                if (!batch.isEmpty()) lastRecord = System.currentTimeMillis();
                boolean caughtUp = true;
                for (TopicPartition tp : all) caughtUp &= consumer.position(tp) >= end.get(tp);
                if (caughtUp) break;
                if (System.currentTimeMillis() - lastRecord > maxIdleMs) {
                    System.out.println("IDLE");
                    break;
                }
            }
            for (TopicPartition tp : all) System.out.println("END " + tp.partition() + "=" + end.get(tp));
            for (TopicPartition tp : all) System.out.println("POSITION " + tp.partition() + "=" + consumer.position(tp));
            System.out.println("COUNT " + count);
        }
    }

    static void readProcessWrite(String bootstrap, String in, String out, String group, String txnId, int count,
            boolean abortFirst, long maxSeconds) {
        Properties c = consumerConfig(bootstrap, "read_committed");
        c.put("group.id", group);
        c.put("session.timeout.ms", "10000");
        c.put("heartbeat.interval.ms", "1000");
        // Several transactions, not one for the whole input.
        c.put("max.poll.records", "50");
        long deadline = System.currentTimeMillis() + 1000 * maxSeconds;
        int processed = 0, txns = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
                KafkaProducer<String, String> producer = new KafkaProducer<>(producerConfig(bootstrap, txnId))) {
            producer.initTransactions();
            consumer.subscribe(List.of(in));
            while (processed < count) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("processed " + processed + " of " + count + " in " + maxSeconds + " s");
                }
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                if (batch.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch) {
                    // A failed send is printed: the test counts the aborted batch in the log.
                    int txn = txns;
                    producer.send(new ProducerRecord<>(out, r.key(), "out-" + r.value()), (meta, error) -> {
                        if (error != null) System.out.println("SEND_ERROR txn=" + txn + " " + error);
                    });
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (abortFirst && txns == 0) {
                    producer.flush();
                    producer.abortTransaction();
                    System.out.println("TXN " + txns + " records=" + batch.count() + " aborted");
                    // Back to the last committed offsets: the aborted batch is processed again.
                    Set<TopicPartition> assigned = consumer.assignment();
                    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
                    for (TopicPartition tp : assigned) {
                        OffsetAndMetadata at = committed.get(tp);
                        if (at == null) consumer.seekToBeginning(List.of(tp));
                        else consumer.seek(tp, at.offset());
                    }
                } else {
                    producer.commitTransaction();
                    processed += batch.count();
                    System.out.println("TXN " + txns + " records=" + batch.count() + " committed");
                }
                txns++;
            }
        }
        System.out.println("PROCESSED " + processed);
    }

    static void committed(String bootstrap, String topic, String group) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap));
                KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig(bootstrap, "read_uncommitted"))) {
            List<TopicPartition> all = partitions(consumer, topic);
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<TopicPartition, Long> end = consumer.endOffsets(all);
            for (TopicPartition tp : all) {
                OffsetAndMetadata at = offsets.get(tp);
                System.out.println("COMMITTED " + tp.partition() + "=" + (at == null ? -1 : at.offset()));
            }
            for (TopicPartition tp : all) System.out.println("END " + tp.partition() + "=" + end.get(tp));
        }
    }

    static void describe(String bootstrap, String topic, String txnId) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            TransactionDescription txn = admin.describeTransactions(List.of(txnId)).description(txnId).get();
            List<String> partitions = new ArrayList<>();
            for (TopicPartition tp : txn.topicPartitions()) partitions.add(tp.topic() + "-" + tp.partition());
            Collections.sort(partitions);
            System.out.println("TXN state=" + txn.state() + " producer=" + txn.producerId() + " epoch="
                    + txn.producerEpoch() + " timeout=" + txn.transactionTimeoutMs() + " partitions="
                    + String.join(",", partitions));
            String listed = "none";
            for (TransactionListing listing : admin.listTransactions().all().get()) {
                if (listing.transactionalId().equals(txnId)) listed = "state=" + listing.state();
            }
            System.out.println("LISTED " + listed);
            int count = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            List<TopicPartition> all = new ArrayList<>();
            for (int p = 0; p < count; p++) all.add(new TopicPartition(topic, p));
            Map<TopicPartition, DescribeProducersResult.PartitionProducerState> producers =
                    admin.describeProducers(all).all().get();
            for (TopicPartition tp : all) {
                for (ProducerState state : producers.get(tp).activeProducers()) {
                    System.out.println("PRODUCER " + tp.partition() + " producer=" + state.producerId() + " epoch="
                            + state.producerEpoch() + " txn-start=" + state.currentTransactionStartOffset().orElse(-1));
                }
            }
        }
    }

    static void hang(String bootstrap, String topic, String txnId, int count, String timeoutMs) throws Exception {
        Properties p = producerConfig(bootstrap, txnId);
        p.put("transaction.timeout.ms", timeoutMs);
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        producer.beginTransaction();
        for (int j = 0; j < count; j++) producer.send(new ProducerRecord<>(topic, "k" + j, "hung-" + j));
        producer.flush();
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }

    static void zombie(String bootstrap, String topic, String txnId, boolean send) throws Exception {
        KafkaProducer<String, String> a = new KafkaProducer<>(producerConfig(bootstrap, txnId));
        a.initTransactions();
        a.beginTransaction();
        a.send(new ProducerRecord<>(topic, "k", "zombie-0")).get();
        try (KafkaProducer<String, String> b = new KafkaProducer<>(producerConfig(bootstrap, txnId))) {
            b.initTransactions();
            b.beginTransaction();
            b.send(new ProducerRecord<>(topic, "k", "fresh-0"));
            b.commitTransaction();
            System.out.println("B COMMITTED");
        }
        try {
            if (send) a.send(new ProducerRecord<>(topic, "k", "zombie-1")).get();
            a.commitTransaction();
            System.out.println("A COMMITTED");
        } catch (ExecutionException error) {
            System.out.println("A FENCED " + error.getCause().getClass().getSimpleName());
        } catch (KafkaException error) {
            System.out.println("A FENCED " + error.getClass().getSimpleName());
        } finally {
            a.close(Duration.ofSeconds(5));
        }
    }
}
