// Delegation tokens with the Java Kafka client (4.4), driven by
// tests/delegation_tokens.rs:
//   java Tokens.java BOOTSTRAP CONFIG_FILE TOPIC
// CONFIG_FILE holds the owner's SASL properties (SCRAM-SHA-512 over SASL_PLAINTEXT).
// As the owner it creates a token renewable by User:bob and describes it; as the
// token (SCRAM with tokenauth=true) it produces 50 records idempotently, reads them
// back in a group, and is refused a token of its own; the owner renews it, then
// expires it, after which the token no longer authenticates. Prints one line per
// step; any unexpected outcome throws.
import java.io.FileInputStream;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.common.serialization.*;

public class Tokens {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[2];
        Properties owner = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            owner.load(in);
        }
        owner.put("bootstrap.servers", bootstrap);
        DelegationToken token;
        try (Admin admin = Admin.create(owner)) {
            var options = new CreateDelegationTokenOptions().renewers(List.of(new KafkaPrincipal("User", "bob")));
            token = admin.createDelegationToken(options).delegationToken().get();
            var info = token.tokenInfo();
            System.out.println("CREATED " + info.tokenId() + " owner=" + info.owner() + " requester="
                    + info.tokenRequester() + " renewers=" + info.renewers());
            if (info.expiryTimestamp() > info.maxTimestamp() || info.issueTimestamp() > info.expiryTimestamp()) {
                throw new IllegalStateException("timestamps out of order: " + info);
            }
            // Kafka's brokers learn a token from the metadata log a moment after the
            // controller answered (Skein answers once every shard holds it): retry.
            List<DelegationToken> described = List.of();
            Optional<DelegationToken> mine = Optional.empty();
            for (long deadline = System.currentTimeMillis() + 10_000; System.currentTimeMillis() < deadline; ) {
                described = admin.describeDelegationToken().delegationTokens().get();
                mine = described.stream().filter(t -> t.tokenInfo().tokenId().equals(info.tokenId())).findFirst();
                if (mine.isPresent()) break;
                Thread.sleep(100);
            }
            if (mine.isEmpty() || !Arrays.equals(mine.get().hmac(), token.hmac())) {
                throw new IllegalStateException("the new token is not described with its HMAC: " + described);
            }
            System.out.println("DESCRIBED " + described.size());
        }

        Properties asToken = new Properties();
        asToken.put("bootstrap.servers", bootstrap);
        asToken.put("security.protocol", owner.getProperty("security.protocol"));
        asToken.put("sasl.mechanism", "SCRAM-SHA-512");
        asToken.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + token.tokenInfo().tokenId() + "\" password=\"" + token.hmacAsBase64String() + "\" tokenauth=\"true\";");
        Properties p = new Properties();
        p.putAll(asToken);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < 50; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get();
            }
        }
        Properties c = new Properties();
        c.putAll(asToken);
        c.put("group.id", "tokens-java");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        int records = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (records < 50 && System.currentTimeMillis() < deadline) {
                records += consumer.poll(Duration.ofMillis(200)).count();
            }
            consumer.commitSync();
        }
        System.out.println("TOKEN RECORDS " + records);
        try (Admin admin = Admin.create(asToken)) {
            admin.createDelegationToken().delegationToken().get();
            throw new IllegalStateException("a token-authenticated client was given a token");
        } catch (ExecutionException e) {
            System.out.println("TOKEN CREATE REFUSED " + e.getCause().getClass().getSimpleName());
        }

        try (Admin admin = Admin.create(owner)) {
            long before = System.currentTimeMillis();
            long renewed = admin.renewDelegationToken(token.hmac(),
                    new RenewDelegationTokenOptions().renewTimePeriodMs(60_000)).expiryTimestamp().get();
            if (renewed < before + 60_000 || renewed > System.currentTimeMillis() + 60_000) {
                throw new IllegalStateException("renewed to " + renewed + ", asked " + before + " + 60000");
            }
            System.out.println("RENEWED");
            try {
                admin.renewDelegationToken("not a token's hmac".getBytes()).expiryTimestamp().get();
                throw new IllegalStateException("an unknown HMAC was renewed");
            } catch (ExecutionException e) {
                System.out.println("UNKNOWN RENEW REFUSED " + e.getCause().getClass().getSimpleName());
            }
            admin.expireDelegationToken(token.hmac(), new ExpireDelegationTokenOptions().expiryTimePeriodMs(-1))
                    .expiryTimestamp().get();
            var left = admin.describeDelegationToken().delegationTokens().get();
            if (left.stream().anyMatch(t -> t.tokenInfo().tokenId().equals(token.tokenInfo().tokenId()))) {
                throw new IllegalStateException("an expired token is still described");
            }
            System.out.println("EXPIRED");
        }
        Properties late = new Properties();
        late.putAll(asToken);
        late.put("default.api.timeout.ms", "10000");
        late.put("request.timeout.ms", "5000");
        try (Admin admin = Admin.create(late)) {
            admin.describeCluster().nodes().get();
            throw new IllegalStateException("an expired token still authenticates");
        } catch (ExecutionException e) {
            System.out.println("EXPIRED TOKEN REFUSED " + e.getCause().getClass().getSimpleName());
        }
    }
}
