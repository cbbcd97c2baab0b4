// Inlet's Kafka security with the Java clients (Apache kafka-clients 4.3.0): SASL_SSL with
// SCRAM-SHA-512 and PLAIN, the node's CA given as a PEM truststore, and the AdminClient's ACL
// and SCRAM credential calls (what kafka-acls and kafka-configs --entity-type users make).
//
// Usage: java -cp CLASSES:LIBS/* SecurityClients SASL_SSL_BOOTSTRAP CA_PEM
//
// The node: a SASL_SSL listener, the ACL authorizer with admin (password admin-secret) as its
// super user. Checks, each printed:
//   a. admin (SCRAM-SHA-512) creates java-secure, produces to it and reads it back;
//   b. admin makes the user bob (SCRAM-SHA-256) with alterUserScramCredentials and sees it in
//      describeUserScramCredentials;
//   c. bob (PLAIN, then SCRAM-SHA-256) is refused a produce to java-secure with
//      TopicAuthorizationException;
//   d. admin allows bob WRITE on java-secure (createAcls, seen by describeAcls): bob produces,
//      and is refused a group with GroupAuthorizationException (no ACL names it for him); a
//      DENY on top refuses his produce again (deny overrides allow); deleteAcls of the DENY
//      allows him again;
//   e. a wrong password fails with SaslAuthenticationException.
// Exits 1 on the first mismatch; prints OK at the end.

import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SecurityClients {
    static String bootstrap;
    static String ca;

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.exit(1);
        }
        System.out.println("ok: " + what);
    }

    static Properties props(String mechanism, String user, String password) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_SSL");
        p.put("ssl.truststore.type", "PEM");
        p.put("ssl.truststore.location", ca);
        p.put("sasl.mechanism", mechanism);
        String module = mechanism.equals("PLAIN")
            ? "org.apache.kafka.common.security.plain.PlainLoginModule"
            : "org.apache.kafka.common.security.scram.ScramLoginModule";
        p.put("sasl.jaas.config", module + " required username=\"" + user + "\" password=\"" + password + "\";");
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    /// The cause of a produce's failure, or null when it was acknowledged.
    static Throwable produce(Properties base, String topic, String value) throws Exception {
        Properties p = (Properties) base.clone();
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "15000");
        p.put("delivery.timeout.ms", "20000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.send(new ProducerRecord<>(topic, value)).get();
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (org.apache.kafka.common.KafkaException e) {
            return e.getCause() != null ? e.getCause() : e;
        }
    }

    static AclBinding acl(String principal, AclOperation op, AclPermissionType permission) {
        return new AclBinding(
            new ResourcePattern(ResourceType.TOPIC, "java-secure", PatternType.LITERAL),
            new AccessControlEntry(principal, "*", op, permission));
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        ca = args[1];
        Properties admin = props("SCRAM-SHA-512", "admin", "admin-secret");
        try (Admin a = Admin.create(admin)) {
            // a.
            a.createTopics(List.of(new NewTopic("java-secure", 1, (short) 1))).all().get();
            check(produce(admin, "java-secure", "from-admin") == null, "admin produces over SASL_SSL (SCRAM-SHA-512)");
            Properties c = (Properties) admin.clone();
            c.put("group.id", "java-admins");
            c.put("auto.offset.reset", "earliest");
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            String got = null;
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                consumer.subscribe(List.of("java-secure"));
                long deadline = System.currentTimeMillis() + 30000;
                while (got == null && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                    for (var r : records) {
                        got = r.value();
                    }
                }
            }
            check("from-admin".equals(got), "admin reads back over SASL_SSL: " + got);

            // b.
            a.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                "bob", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "bob-secret"))).all().get();
            Map<String, UserScramCredentialsDescription> users =
                a.describeUserScramCredentials(List.of("bob")).all().get();
            check(users.get("bob").credentialInfos().get(0).mechanism() == ScramMechanism.SCRAM_SHA_256,
                "bob's SCRAM-SHA-256 credential is described");

            // c.
            for (String mechanism : List.of("PLAIN", "SCRAM-SHA-256")) {
                Throwable refused = produce(props(mechanism, "bob", "bob-secret"), "java-secure", "no");
                check(refused instanceof TopicAuthorizationException,
                    "bob (" + mechanism + ") without an ACL is refused: " + refused);
            }
            // d.
            a.createAcls(List.of(acl("User:bob", AclOperation.WRITE, AclPermissionType.ALLOW))).all().get();
            var described = a.describeAcls(AclBindingFilter.ANY).values().get();
            check(described.contains(acl("User:bob", AclOperation.WRITE, AclPermissionType.ALLOW)),
                "describeAcls shows the ALLOW: " + described);
            check(produce(props("SCRAM-SHA-256", "bob", "bob-secret"), "java-secure", "allowed") == null,
                "bob produces once allowed");
            Properties g = props("SCRAM-SHA-256", "bob", "bob-secret");
            g.put("group.id", "bobs-group");
            g.put("key.deserializer", StringDeserializer.class.getName());
            g.put("value.deserializer", StringDeserializer.class.getName());
            Throwable groupRefused = null;
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(g)) {
                consumer.subscribe(List.of("java-secure"));
                long deadline = System.currentTimeMillis() + 20000;
                while (groupRefused == null && System.currentTimeMillis() < deadline) {
                    try {
                        consumer.poll(Duration.ofMillis(500));
                    } catch (GroupAuthorizationException | TopicAuthorizationException e) {
                        groupRefused = e;
                    }
                }
            }
            check(groupRefused instanceof GroupAuthorizationException,
                "bob, allowed the topic but not the group, is refused the group: " + groupRefused);

            AclBinding deny = acl("User:bob", AclOperation.WRITE, AclPermissionType.DENY);
            a.createAcls(List.of(deny)).all().get();
            // Not idempotent: with its only WRITE denied, an idempotent producer is refused
            // earlier, at InitProducerId (CLUSTER_AUTHORIZATION_FAILED, as Kafka answers).
            Properties plain = props("SCRAM-SHA-256", "bob", "bob-secret");
            plain.put("enable.idempotence", "false");
            Throwable denied = produce(plain, "java-secure", "denied");
            check(denied instanceof TopicAuthorizationException, "a DENY overrides the ALLOW: " + denied);
            var deleted = a.deleteAcls(List.of(deny.toFilter())).all().get();
            check(deleted.size() == 1 && deleted.contains(deny), "deleteAcls deletes the DENY: " + deleted);
            check(produce(props("SCRAM-SHA-256", "bob", "bob-secret"), "java-secure", "again") == null,
                "bob produces again without the DENY");
        }

        // e.
        Throwable wrong = produce(props("SCRAM-SHA-512", "admin", "wrong"), "java-secure", "x");
        check(wrong instanceof SaslAuthenticationException, "a wrong password fails authentication: " + wrong);
        System.out.println("OK");
        System.exit(0);
    }
}
