// The Java Kafka client (4.1) against a secured Skein listener, driven by
// tests/security.rs:
//   java Secured.java BOOTSTRAP CONFIG_FILE TOPIC NEW_USER
// CONFIG_FILE holds the client's security properties (security.protocol,
// sasl.mechanism, sasl.jaas.config, ssl.truststore.*). It adds NEW_USER's
// SCRAM-SHA-256 credential with Admin.alterUserScramCredentials (KIP-554), lists the
// users with describeUserScramCredentials, produces 100 records idempotently and
// reads them back in a group. Prints "USERS a,b,..." and "RECORDS n".
import java.io.FileInputStream;
import java.time.Duration;
import java.util.*;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class Secured {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[2], newUser = args[3];
        Properties security = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            security.load(in);
        }
        Properties base = new Properties();
        base.putAll(security);
        base.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(base)) {
            var info = new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192);
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(newUser, info, "new-secret")))
                    .all().get();
            var users = admin.describeUserScramCredentials().all().get();
            System.out.println("USERS " + users.keySet().stream().sorted().collect(Collectors.joining(",")));
        }
        Properties p = new Properties();
        p.putAll(base);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < 100; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get();
            }
        }
        Properties c = new Properties();
        c.putAll(base);
        c.put("group.id", "secured-java");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        int records = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (records < 100 && System.currentTimeMillis() < deadline) {
                records += consumer.poll(Duration.ofMillis(200)).count();
            }
            consumer.commitSync();
        }
        System.out.println("RECORDS " + records);
    }
}
