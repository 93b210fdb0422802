// The Kafka 4.4 Java share consumer (KIP-932) against a broker, for the share group
// tests; run with the source launcher:
//   java -cp "$(cat target/kafka-share-classpath.txt)" tests/share/Share.java MODE ARGS...
// Modes (every line on stdout is machine-readable; exit 0 on success, non-zero with a
// message on stderr on failure):
//   create BOOTSTRAP TOPIC PARTITIONS            -> "CREATED topic partitions" (or "EXISTS topic");
//       extra arguments topic.NAME=VALUE are the new topic's configs
//   produce BOOTSTRAP TOPIC COUNT                -> "PRODUCED n" (keys k<i%10>, values v<i>, acks=all)
//   set-reset BOOTSTRAP GROUP VALUE              -> "OK" (group config share.auto.offset.reset)
//   set-config BOOTSTRAP GROUP NAME VALUE        -> "OK" (any group config, e.g. share.record.lock.duration.ms)
//   set-broker-config BOOTSTRAP NAME VALUE       -> "OK" (a dynamic broker config, cluster default)
//   consume BOOTSTRAP TOPIC GROUP EXPECT SECONDS -> "R partition offset deliveryCount value" per
//       record, "DONE distinct total"; implicit acknowledgement; stops at EXPECT distinct
//       (partition, offset) records (0: never) or after SECONDS, then commitSync and close.
//   explicit BOOTSTRAP TOPIC GROUP EXPECT SECONDS -> explicit acknowledgement: value number
//       %10 == 3 REJECT, %10 == 7 on its first delivery RELEASE, else ACCEPT; commitSync after
//       each poll; "R partition offset deliveryCount ACK" per record and
//       "DONE finished total accepted rejected released", finished being the distinct records
//       accepted or rejected; stops at EXPECT finished (0: never) or after SECONDS.
//   checked BOOTSTRAP TOPIC GROUP EXPECT SECONDS -> explicit acknowledgement, every record
//       ACCEPT, commitSync after each poll; "R partition offset deliveryCount ACCEPT" per record
//       and "AT ms partition offset" when it arrived; for each record whose acknowledgement the
//       broker answered without error, "ACKED partition offset ms", ms when the acknowledgement was sent (for the at-least-once
//       checker of the cluster tests and the key-ordering checker).
//   hold BOOTSTRAP TOPIC GROUP SECONDS           -> explicit acknowledgement; polls until it has
//       records (at most 30 s), prints "HELD n" and "R partition offset deliveryCount value"
//       per record, sleeps SECONDS without acknowledging or polling (its connection and
//       membership stay up: the acquisition locks must expire, share.record.lock.duration.ms),
//       then halts without closing. (Kafka 4.4 releases a dead client's records as soon as
//       its connection closes, before the locks expire.)
//   produce-txn BOOTSTRAP TOPIC COUNT            -> transactions of COUNT records: committed ("c<i>"),
//       aborted ("a<i>"), committed; "TXN committed aborted".
//   latency BOOTSTRAP TOPIC GROUP COUNT RATE     -> a producer sends COUNT records at RATE/s while a
//       share consumer takes them: "LATENCY p50 p99 max n" (microseconds, send to poll).
//   read BOOTSTRAP TOPIC EXPECT SECONDS          -> a plain consumer reads TOPIC from its start:
//       "M partition offset key value name=value;name=value..." per record (key and value
//       "null" when null; headers in order), "DONE n"; stops at EXPECT records or after SECONDS.
//   describe BOOTSTRAP GROUP                     -> "GROUP id state members", per member
//       "MEMBER memberId clientId topic-p,topic-p" (sorted; "-" for none), then per partition
//       "OFFSET topic partition startOffset" and, where the broker gives it, "LAG topic partition lag".
// consume and explicit print "POLL n" before the records of each poll that returned any.
// consume, explicit and hold also print "FIRST ms" once, the milliseconds from creating the
// consumer to its first record, and "ACKFAIL partition error" for an acknowledgement the broker
// refused. Arguments after the listed ones of the form name=value go to the client's config
// (e.g. client.id=c1, max.poll.records=5, share.acquire.mode=record_limit), except pause.ms=N,
// a sleep after each poll that returned records, and ack.delay.ms=N, a sleep between a poll
// and its acknowledgement (records stay acquired meanwhile). A watchdog halts every mode (status 3) a
// while after its time bound.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.*;

public class Share {
    /** Bound for the modes without a SECONDS argument, and the grace after it for those with one. */
    static final int ADMIN_SECONDS = 30;

    public static void main(String[] args) {
        try {
            run(args);
            System.out.flush();
            System.exit(0);
        } catch (Throwable e) {
            System.out.flush();
            System.err.println("share: " + args[0] + " failed: " + e);
            Throwable cause = e.getCause();
            while (cause != null) {
                System.err.println("  caused by: " + cause);
                cause = cause.getCause();
            }
            System.exit(1);
        }
    }

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** Halts the process, whatever it is blocked on, SECONDS from now. */
    static void watchdog(String mode, long seconds) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(seconds * 1000);
            } catch (InterruptedException e) {
                return;
            }
            System.out.flush();
            System.err.println("share: " + mode + " did not finish within " + seconds + " s");
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        t.setDaemon(true);
        t.start();
    }

    /** The name=value arguments from index FROM on. */
    static Map<String, String> extra(String[] args, int from) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = from; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) throw new IllegalArgumentException("expected name=value, got " + args[i]);
            m.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        return m;
    }

    static void need(String[] args, int n, String usage) {
        if (args.length < n) throw new IllegalArgumentException("usage: " + usage);
    }

    static Admin admin(String bootstrap, Map<String, String> extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("default.api.timeout.ms", String.valueOf(ADMIN_SECONDS * 1000));
        p.put("request.timeout.ms", "10000");
        p.putAll(extra);
        return Admin.create(p);
    }

    static void run(String[] args) throws Exception {
        if (args.length < 2) throw new IllegalArgumentException("usage: Share MODE BOOTSTRAP ARGS...");
        String mode = args[0], bootstrap = args[1];
        switch (mode) {
            case "create": {
                need(args, 4, "create BOOTSTRAP TOPIC PARTITIONS");
                watchdog(mode, ADMIN_SECONDS + 10);
                Map<String, String> extra = extra(args, 4), topicConfigs = new HashMap<>();
                for (String name : new ArrayList<>(extra.keySet())) {
                    if (name.startsWith("topic.")) topicConfigs.put(name.substring(6), extra.remove(name));
                }
                try (Admin admin = admin(bootstrap, extra)) {
                    NewTopic topic = new NewTopic(args[2], Integer.parseInt(args[3]), (short) 1).configs(topicConfigs);
                    admin.createTopics(List.of(topic)).all().get(ADMIN_SECONDS, TimeUnit.SECONDS);
                    out("CREATED " + args[2] + " " + args[3]);
                } catch (java.util.concurrent.ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) throw e;
                    out("EXISTS " + args[2]);
                }
                return;
            }
            case "produce": {
                need(args, 4, "produce BOOTSTRAP TOPIC COUNT");
                watchdog(mode, ADMIN_SECONDS + 10);
                produce(bootstrap, args[2], Integer.parseInt(args[3]), extra(args, 4));
                return;
            }
            case "set-reset": {
                need(args, 4, "set-reset BOOTSTRAP GROUP VALUE");
                watchdog(mode, ADMIN_SECONDS + 10);
                setConfig(bootstrap, args[2], "share.auto.offset.reset", args[3], extra(args, 4));
                return;
            }
            case "set-config": {
                need(args, 5, "set-config BOOTSTRAP GROUP NAME VALUE");
                watchdog(mode, ADMIN_SECONDS + 10);
                setConfig(bootstrap, args[2], args[3], args[4], extra(args, 5));
                return;
            }
            case "set-broker-config": {
                need(args, 4, "set-broker-config BOOTSTRAP NAME VALUE");
                watchdog(mode, ADMIN_SECONDS + 10);
                try (Admin admin = admin(bootstrap, extra(args, 4))) {
                    ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "");
                    AlterConfigOp op = new AlterConfigOp(new ConfigEntry(args[2], args[3]), AlterConfigOp.OpType.SET);
                    admin.incrementalAlterConfigs(Map.of(broker, List.of(op))).all().get(ADMIN_SECONDS, TimeUnit.SECONDS);
                }
                out("OK");
                return;
            }
            case "describe": {
                need(args, 3, "describe BOOTSTRAP GROUP");
                watchdog(mode, ADMIN_SECONDS + 10);
                describe(bootstrap, args[2], extra(args, 3));
                return;
            }
            case "consume":
            case "checked":
            case "explicit": {
                need(args, 6, mode + " BOOTSTRAP TOPIC GROUP EXPECT SECONDS");
                int seconds = Integer.parseInt(args[5]);
                watchdog(mode, seconds + ADMIN_SECONDS);
                checked = mode.equals("checked");
                consume(!mode.equals("consume"), bootstrap, args[2], args[3], Integer.parseInt(args[4]), seconds,
                        extra(args, 6));
                return;
            }
            case "hold": {
                need(args, 5, "hold BOOTSTRAP TOPIC GROUP SECONDS");
                int seconds = Integer.parseInt(args[4]);
                watchdog(mode, seconds + 2L * ADMIN_SECONDS);
                hold(bootstrap, args[2], args[3], seconds, extra(args, 5));
                return;
            }
            case "read": {
                need(args, 5, "read BOOTSTRAP TOPIC EXPECT SECONDS");
                int seconds = Integer.parseInt(args[4]);
                watchdog(mode, seconds + ADMIN_SECONDS);
                read(bootstrap, args[2], Integer.parseInt(args[3]), seconds, extra(args, 5));
                return;
            }
            case "produce-txn": {
                need(args, 4, "produce-txn BOOTSTRAP TOPIC COUNT");
                watchdog(mode, 2L * ADMIN_SECONDS);
                produceTransactions(bootstrap, args[2], Integer.parseInt(args[3]), extra(args, 4));
                return;
            }
            case "latency": {
                need(args, 6, "latency BOOTSTRAP TOPIC GROUP COUNT RATE");
                int count = Integer.parseInt(args[4]), rate = Integer.parseInt(args[5]);
                watchdog(mode, count / Math.max(1, rate) + 3L * ADMIN_SECONDS);
                latency(bootstrap, args[2], args[3], count, rate, extra(args, 6));
                return;
            }
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static void read(String bootstrap, String topic, int expect, int seconds, Map<String, String> extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("auto.offset.reset", "earliest");
        p.putAll(extra);
        int n = 0;
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                    .map(i -> new TopicPartition(topic, i.partition())).collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            long end = System.currentTimeMillis() + seconds * 1000L;
            while (n < expect && System.currentTimeMillis() < end) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    StringBuilder headers = new StringBuilder();
                    for (org.apache.kafka.common.header.Header h : r.headers()) {
                        if (headers.length() > 0) headers.append(';');
                        headers.append(h.key()).append('=')
                                .append(h.value() == null ? "null" : new String(h.value(), java.nio.charset.StandardCharsets.UTF_8));
                    }
                    out("M " + r.partition() + " " + r.offset() + " " + r.key() + " " + r.value() + " " + headers);
                    n++;
                }
            }
        }
        out("DONE " + n);
    }

    static void produce(String bootstrap, String topic, int count, Map<String, String> extra) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("max.block.ms", String.valueOf(ADMIN_SECONDS * 1000));
        p.put("request.timeout.ms", "10000");
        p.put("delivery.timeout.ms", String.valueOf(ADMIN_SECONDS * 1000));
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.putAll(extra);
        List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) sent.add(producer.send(new ProducerRecord<>(topic, "k" + (i % 10), "v" + i)));
            producer.flush();
            for (var f : sent) f.get(ADMIN_SECONDS, TimeUnit.SECONDS);
        }
        out("PRODUCED " + sent.size());
    }

    /** Three transactions of COUNT records each: committed ("c<i>"), aborted ("a<i>"),
     *  committed again. Prints "TXN committed aborted". */
    static void produceTransactions(String bootstrap, String topic, int count, Map<String, String> extra)
            throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", "share-txn-" + topic);
        p.put("max.block.ms", String.valueOf(ADMIN_SECONDS * 1000));
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.putAll(extra);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            int n = 0;
            for (String kind : List.of("c", "a", "c")) {
                producer.beginTransaction();
                for (int i = 0; i < count; i++) producer.send(new ProducerRecord<>(topic, "k" + (n % 10), kind + n++));
                producer.flush();
                if (kind.equals("a")) producer.abortTransaction();
                else producer.commitTransaction();
            }
        }
        out("TXN " + 2 * count + " " + count);
    }

    /** End to end: a producer sends COUNT records at RATE a second, each carrying its send
     *  time; a share consumer (implicit acknowledgement) in the same process takes them.
     *  Prints "LATENCY p50 p99 max n" in microseconds, over first deliveries. */
    static void latency(String bootstrap, String topic, String group, int count, int rate, Map<String, String> extra)
            throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("linger.ms", "0");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaShareConsumer<String, String> consumer = shareConsumer(bootstrap, group, false, extra);
        consumer.subscribe(List.of(topic));
        long[] latencies = new long[count];
        int seen = 0;
        Thread producing = new Thread(() -> {
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                long start = System.nanoTime();
                long gap = 1_000_000_000L / Math.max(1, rate);
                for (int i = 0; i < count; i++) {
                    long due = start + i * gap;
                    while (System.nanoTime() < due) Thread.onSpinWait();
                    producer.send(new ProducerRecord<>(topic, "k" + (i % 10), "t" + System.nanoTime()));
                }
                producer.flush();
            }
        });
        // The consumer joins first, then the producer starts.
        consumer.poll(Duration.ofMillis(1000));
        producing.start();
        long deadline = System.currentTimeMillis() + 1000L * (count / Math.max(1, rate) + ADMIN_SECONDS);
        try {
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    long now = System.nanoTime();
                    if (r.deliveryCount().orElse((short) 1) == 1 && seen < count)
                        latencies[seen++] = (now - Long.parseLong(r.value().substring(1))) / 1000;
                }
            }
            consumer.commitSync(Duration.ofSeconds(10));
        } finally {
            consumer.close(Duration.ofSeconds(10));
        }
        producing.join();
        long[] got = Arrays.copyOf(latencies, seen);
        Arrays.sort(got);
        if (seen == 0) throw new IllegalStateException("no record consumed");
        out("LATENCY " + got[seen / 2] + " " + got[Math.min(seen - 1, (int) (seen * 0.99))] + " " + got[seen - 1] + " " + seen);
    }

    static void setConfig(String bootstrap, String group, String name, String value, Map<String, String> extra)
            throws Exception {
        try (Admin admin = admin(bootstrap, extra)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get(ADMIN_SECONDS, TimeUnit.SECONDS);
        }
        out("OK");
    }

    static void describe(String bootstrap, String group, Map<String, String> extra) throws Exception {
        try (Admin admin = admin(bootstrap, extra)) {
            ShareGroupDescription d = admin.describeShareGroups(List.of(group)).describedGroups().get(group)
                    .get(ADMIN_SECONDS, TimeUnit.SECONDS);
            out("GROUP " + d.groupId() + " " + d.groupState() + " " + d.members().size());
            List<ShareMemberDescription> members = new ArrayList<>(d.members());
            members.sort(Comparator.comparing(ShareMemberDescription::consumerId));
            for (ShareMemberDescription m : members) {
                String assigned = m.assignment().topicPartitions().stream()
                        .sorted(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition))
                        .map(TopicPartition::toString).collect(Collectors.joining(","));
                out("MEMBER " + m.consumerId() + " " + m.clientId() + " " + (assigned.isEmpty() ? "-" : assigned));
            }
            Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin
                    .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                    .partitionsToOffsetInfo(group).get(ADMIN_SECONDS, TimeUnit.SECONDS);
            List<TopicPartition> partitions = new ArrayList<>(offsets.keySet());
            partitions.sort(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition));
            for (TopicPartition tp : partitions) {
                SharePartitionOffsetInfo info = offsets.get(tp);
                out("OFFSET " + tp.topic() + " " + tp.partition() + " " + (info == null ? -1 : info.startOffset()));
                if (info != null && info.lag().isPresent())
                    out("LAG " + tp.topic() + " " + tp.partition() + " " + info.lag().get());
            }
        }
    }

    static KafkaShareConsumer<String, String> shareConsumer(String bootstrap, String group, boolean explicit,
            Map<String, String> extra) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.putAll(extra);
        return new KafkaShareConsumer<>(c);
    }

    /** The i of a value "v<i>", or -1. */
    static int number(String value) {
        try {
            return Integer.parseInt(value.substring(1));
        } catch (RuntimeException e) {
            return -1;
        }
    }

    /** checked mode: every record accepted, and the acknowledgements answered reported. */
    static boolean checked = false;

    static Set<Integer> reportFailures(Map<TopicIdPartition, Optional<KafkaException>> result) {
        Set<Integer> failed = new HashSet<>();
        if (result == null) return failed;
        for (var e : result.entrySet())
            e.getValue().ifPresent(error -> {
                failed.add(e.getKey().partition());
                out("ACKFAIL " + e.getKey().partition() + " " + error);
            });
        return failed;
    }

    static void consume(boolean explicit, String bootstrap, String topic, String group, int expect, int seconds,
            Map<String, String> extra) throws Exception {
        long pause = Long.parseLong(extra.getOrDefault("pause.ms", "0"));
        extra.remove("pause.ms");
        long ackDelay = Long.parseLong(extra.getOrDefault("ack.delay.ms", "0"));
        extra.remove("ack.delay.ms");
        long start = System.currentTimeMillis(), deadline = start + 1000L * seconds;
        Set<String> seen = new HashSet<>(), finished = new HashSet<>();
        int total = 0, accepted = 0, rejected = 0, released = 0;
        boolean first = true;
        KafkaShareConsumer<String, String> consumer = shareConsumer(bootstrap, group, explicit, extra);
        consumer.setAcknowledgementCommitCallback((offsets, error) -> {
            if (error != null)
                offsets.keySet().forEach(tip -> out("ACKFAIL " + tip.partition() + " " + error));
        });
        try {
            consumer.subscribe(List.of(topic));
            while (true) {
                int done = explicit ? finished.size() : seen.size();
                if (expect > 0 && done >= expect) break;
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) break;
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(Math.min(500, left)));
                if (!batch.isEmpty()) {
                    if (first) out("FIRST " + (System.currentTimeMillis() - start));
                    first = false;
                    out("POLL " + batch.count());
                }
                for (ConsumerRecord<String, String> r : batch) {
                    total++;
                    String key = r.partition() + ":" + r.offset();
                    seen.add(key);
                    short deliveries = r.deliveryCount().orElse((short) -1);
                    if (!explicit) {
                        out("R " + r.partition() + " " + r.offset() + " " + deliveries + " " + r.value());
                        continue;
                    }
                    int n = number(r.value());
                    AcknowledgeType ack;
                    if (checked) {
                        // Finished once the broker answers the acknowledgement (below).
                        ack = AcknowledgeType.ACCEPT;
                        accepted++;
                    } else if (n % 10 == 3) {
                        ack = AcknowledgeType.REJECT;
                        rejected++;
                        finished.add(key);
                    } else if (n % 10 == 7 && deliveries == 1) {
                        ack = AcknowledgeType.RELEASE;
                        released++;
                    } else {
                        ack = AcknowledgeType.ACCEPT;
                        accepted++;
                        finished.add(key);
                    }
                    consumer.acknowledge(r, ack);
                    out("R " + r.partition() + " " + r.offset() + " " + deliveries + " " + ack.name());
                    if (checked) out("AT " + System.currentTimeMillis() + " " + r.partition() + " " + r.offset());
                }
                if (ackDelay > 0 && !batch.isEmpty()) Thread.sleep(ackDelay);
                if (explicit && !batch.isEmpty()) {
                    // When the acknowledgements leave (the broker takes them after this).
                    long committing = System.currentTimeMillis();
                    Set<Integer> failed = reportFailures(
                            consumer.commitSync(Duration.ofMillis(Math.max(1000, deadline - System.currentTimeMillis()))));
                    if (checked)
                        for (ConsumerRecord<String, String> r : batch)
                            if (!failed.contains(r.partition())) {
                                out("ACKED " + r.partition() + " " + r.offset() + " " + committing);
                                finished.add(r.partition() + ":" + r.offset());
                            }
                }
                if (pause > 0 && !batch.isEmpty()) Thread.sleep(pause);
            }
            // Implicit mode: acknowledges (accepts) what the last poll delivered.
            reportFailures(consumer.commitSync(Duration.ofSeconds(10)));
        } finally {
            consumer.close(Duration.ofSeconds(10));
        }
        if (explicit) out("DONE " + finished.size() + " " + total + " " + accepted + " " + rejected + " " + released);
        else out("DONE " + seen.size() + " " + total);
    }

    static void hold(String bootstrap, String topic, String group, int seconds, Map<String, String> extra)
            throws Exception {
        extra.remove("pause.ms");
        long start = System.currentTimeMillis(), deadline = start + 1000L * ADMIN_SECONDS;
        KafkaShareConsumer<String, String> consumer = shareConsumer(bootstrap, group, true, extra);
        consumer.subscribe(List.of(topic));
        ConsumerRecords<String, String> batch = ConsumerRecords.empty();
        while (batch.isEmpty()) {
            long left = deadline - System.currentTimeMillis();
            if (left <= 0) throw new IllegalStateException("no records within " + ADMIN_SECONDS + " s");
            batch = consumer.poll(Duration.ofMillis(Math.min(500, left)));
        }
        out("FIRST " + (System.currentTimeMillis() - start));
        out("HELD " + batch.count());
        for (ConsumerRecord<String, String> r : batch)
            out("R " + r.partition() + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1) + " " + r.value());
        Thread.sleep(1000L * seconds);
        // No acknowledgement, no close: what the broker still holds for this member it
        // releases when the locks expire or the connection closes.
        Runtime.getRuntime().halt(0);
    }
}
