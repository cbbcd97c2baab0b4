// SASL/OAUTHBEARER with the Java client (Apache kafka-clients 4.3.0) and nothing but Inlet: the
// client's own OAuth2 login (OAuthBearerLoginCallbackHandler, the client-credentials grant)
// fetches its token from the node's HTTP listener, `/iceberg/v1/oauth/tokens`, and the Kafka
// listener takes it.
//
// Usage: java -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=TOKEN_URL -cp CLASSES:LIBS/*
//        OAuthClients SASL_BOOTSTRAP TOKEN_URL TOPIC GROUP
//
// The node: a SASL_PLAINTEXT listener with OAUTHBEARER, `[http] authentication = "token"`, the
// ACL authorizer; alice (password alice-secret) may write and read TOPIC and use GROUP.
// Checks, each printed:
//   a. alice (client id alice, secret alice-secret) produces to TOPIC and reads her record back
//      in GROUP;
//   b. a wrong client secret: the token endpoint refuses it, and the producer never
//      authenticates (the send fails).
// Exits 1 on the first mismatch; prints OK at the end.

import java.time.Duration;
import java.util.Collections;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class OAuthClients {
    static String bootstrap;
    static String tokenUrl;

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.exit(1);
        }
        System.out.println("ok: " + what);
    }

    static Properties props(String clientId, String secret) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "OAUTHBEARER");
        p.put("sasl.oauthbearer.token.endpoint.url", tokenUrl);
        p.put("sasl.login.callback.handler.class",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler");
        p.put("sasl.jaas.config",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId=\""
                + clientId + "\" clientSecret=\"" + secret + "\";");
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        tokenUrl = args[1];
        String topic = args[2];
        String group = args[3];
        String value = "java-oauth-" + UUID.randomUUID();

        Properties pp = props("alice", "alice-secret");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            producer.send(new ProducerRecord<>(topic, "k", value)).get(60, TimeUnit.SECONDS);
        }
        check(true, "a. alice produces with a token from Inlet's token endpoint");
        Properties cp = props("alice", "alice-secret");
        cp.put("group.id", group);
        cp.put("auto.offset.reset", "earliest");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        boolean seen = false;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(Collections.singletonList(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (!seen && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> r : records) {
                    seen |= value.equals(r.value());
                }
            }
        }
        check(seen, "a. alice reads her record back in her group");

        Properties bad = props("alice", "not-her-secret");
        bad.put("key.serializer", StringSerializer.class.getName());
        bad.put("value.serializer", StringSerializer.class.getName());
        bad.put("max.block.ms", "10000");
        Throwable failure = null;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(bad)) {
            producer.send(new ProducerRecord<>(topic, "k", "never")).get(30, TimeUnit.SECONDS);
        } catch (Exception e) {
            failure = e;
        }
        check(failure != null, "b. a wrong client secret never authenticates: " + failure);
        System.out.println("OK");
    }
}
