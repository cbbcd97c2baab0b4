// Client quotas with the Java clients (Apache kafka-clients 4.3.0): the AdminClient's
// alterClientQuotas and describeClientQuotas (what kafka-configs --entity-type users|clients
// makes), and a producer and a consumer held to their byte rates by the throttle times in
// Inlet's answers.
//
// Usage: java -cp CLASSES:LIBS/* QuotaClients BOOTSTRAP
//
// The node: a PLAINTEXT listener, the ACL authorizer with allow.everyone.if.no.acl.found=true
// (this client is User:ANONYMOUS), quota.window.num=3 and quota.window.size.seconds=1 (a rate
// is held over three seconds, so a client moving B bytes at quota Q takes at least
// (B - 3 Q - its last request) / Q). Checks,
// each printed:
//   a. quotas set for the client id java-slow (produce and fetch), the user alice with the
//      default client id (request time), and the default user (a request time no client
//      reaches: it does not take precedence over java-slow's byte rates, and has every
//      request's thread time measured) are described back, whole and by filters;
//   b. bad quotas are refused with InvalidRequestException and their reason (a fractional
//      byte rate, an unknown key, an ip entity), and nothing of them is stored;
//   c. java-slow produces 2 MiB: it takes at least what its quota allows, its producer
//      reports throttle times, and java-fast (no quota) sends
//      the same in a fraction of that;
//   d. java-slow reads the 2 MiB back held to its fetch quota, reporting throttle times;
//   e. with ALL allowed and ALTER_CONFIGS denied on the cluster, alterClientQuotas fails with
//      ClusterAuthorizationException; describing still works;
//   f. a removed quota is gone from describeClientQuotas.
// Exits 1 on the first mismatch; prints OK at the end.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class QuotaClients {
    static final int QUOTA = 256 * 1024;
    static final int TOTAL = 2 * 1024 * 1024;
    static final int WINDOW_SECONDS = 3;
    static final int FETCH_MAX = 256 * 1024;
    static final int BATCH = 16 * 1024;
    static String bootstrap;

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.exit(1);
        }
        System.out.println("ok: " + what);
    }

    static Properties props(String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("request.timeout.ms", "30000");
        p.put("default.api.timeout.ms", "60000");
        return p;
    }

    static ClientQuotaEntity entity(String type, String name) {
        return new ClientQuotaEntity(Collections.singletonMap(type, name));
    }

    static ClientQuotaAlteration set(ClientQuotaEntity e, String key, Double value) {
        return new ClientQuotaAlteration(e, List.of(new ClientQuotaAlteration.Op(key, value)));
    }

    static Throwable alterFails(Admin a, ClientQuotaAlteration alteration) throws Exception {
        try {
            a.alterClientQuotas(List.of(alteration)).all().get();
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        }
    }

    static double metric(Map<MetricName, ? extends Metric> metrics, String name) {
        double most = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : metrics.entrySet()) {
            if (m.getKey().name().equals(name) && m.getValue().metricValue() instanceof Double) {
                Double v = (Double) m.getValue().metricValue();
                if (!v.isNaN()) {
                    most = Math.max(most, v);
                }
            }
        }
        return most;
    }

    /// Sends TOTAL bytes in 1 KiB records as client `clientId`; the seconds it took, and the
    /// largest throttle time the producer saw.
    static double[] produce(String clientId, String topic) throws Exception {
        Properties p = props(clientId);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("linger.ms", "5");
        p.put("batch.size", String.valueOf(BATCH));
        p.put("acks", "all");
        byte[] value = new byte[1024];
        long start = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < TOTAL / value.length; i++) {
                producer.send(new ProducerRecord<>(topic, value));
            }
            producer.flush();
            double seconds = (System.nanoTime() - start) / 1e9;
            return new double[] {seconds, metric(producer.metrics(), "produce-throttle-time-max")};
        }
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        try (Admin a = Admin.create(props("java-admin"))) {
            // a.
            ClientQuotaEntity slow = entity(ClientQuotaEntity.CLIENT_ID, "java-slow");
            Map<String, String> aliceDefault = new java.util.HashMap<>();
            aliceDefault.put(ClientQuotaEntity.USER, "alice");
            aliceDefault.put(ClientQuotaEntity.CLIENT_ID, null);
            ClientQuotaEntity alice = new ClientQuotaEntity(aliceDefault);
            ClientQuotaEntity defaultUser = entity(ClientQuotaEntity.USER, null);
            a.alterClientQuotas(List.of(
                new ClientQuotaAlteration(slow, List.of(
                    new ClientQuotaAlteration.Op("producer_byte_rate", (double) QUOTA),
                    new ClientQuotaAlteration.Op("consumer_byte_rate", (double) QUOTA))),
                set(alice, "request_percentage", 12.5),
                set(defaultUser, "request_percentage", 1e6))).all().get();
            Map<ClientQuotaEntity, Map<String, Double>> all =
                a.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            check(all.size() == 3, "three entities have quotas: " + all);
            check(all.get(slow).equals(Map.of("producer_byte_rate", (double) QUOTA, "consumer_byte_rate", (double) QUOTA)),
                "java-slow's quotas are described back: " + all.get(slow));
            check(all.get(alice).equals(Map.of("request_percentage", 12.5)), "alice's default-client quota: " + all.get(alice));
            check(all.get(defaultUser).equals(Map.of("request_percentage", 1e6)), "the default user's quota: " + all.get(defaultUser));
            Map<ClientQuotaEntity, Map<String, Double>> users = a.describeClientQuotas(ClientQuotaFilter.containsOnly(
                List.of(ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.USER)))).entities().get();
            check(users.keySet().equals(java.util.Set.of(defaultUser)), "strictly the default user: " + users.keySet());
            Map<ClientQuotaEntity, Map<String, Double>> anyUser = a.describeClientQuotas(ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.USER)))).entities().get();
            check(anyUser.keySet().equals(java.util.Set.of(alice)), "entities naming a user: " + anyUser.keySet());
            Map<ClientQuotaEntity, Map<String, Double>> named = a.describeClientQuotas(ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, "alice")))).entities().get();
            check(named.keySet().equals(java.util.Set.of(alice)), "alice's entities by name: " + named.keySet());
            Map<ClientQuotaEntity, Map<String, Double>> defaults = a.describeClientQuotas(ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.CLIENT_ID)))).entities().get();
            check(defaults.keySet().equals(java.util.Set.of(alice)), "entities with the default client id: " + defaults.keySet());

            // b.
            ClientQuotaEntity bad = entity(ClientQuotaEntity.CLIENT_ID, "java-bad");
            Throwable e = alterFails(a, set(bad, "producer_byte_rate", 1.5));
            check(e instanceof InvalidRequestException && e.getMessage().contains("whole"), "a fractional byte rate is refused: " + e);
            e = alterFails(a, set(bad, "bogus_rate", 10.0));
            check(e instanceof InvalidRequestException && e.getMessage().contains("bogus_rate"), "an unknown quota is refused: " + e);
            e = alterFails(a, set(entity(ClientQuotaEntity.IP, "10.0.0.1"), "connection_creation_rate", 10.0));
            check(e instanceof InvalidRequestException && e.getMessage().contains("ip"), "an ip quota is refused: " + e);
            check(a.describeClientQuotas(ClientQuotaFilter.all()).entities().get().size() == 3, "nothing of the refused quotas is stored");

            // c.
            a.createTopics(List.of(new NewTopic("java-quota", 1, (short) 1))).all().get();
            double[] fast = produce("java-fast", "java-quota");
            // Held to the quota over a window of WINDOW_SECONDS, less the last request (its
            // throttle comes after it is answered), with room for timing noise.
            double least = (double) (TOTAL - WINDOW_SECONDS * QUOTA - BATCH) / QUOTA * 0.9;
            double[] held = produce("java-slow", "java-quota");
            System.out.printf("produce: java-fast %.2f s, java-slow %.2f s (at least %.2f s), throttle max %.0f ms%n",
                fast[0], held[0], least, held[1]);
            check(held[0] >= least, "java-slow's produce is held to its quota");
            check(held[1] > 0, "java-slow's producer saw throttle times");
            check(fast[1] == 0, "java-fast saw no throttle time");
            check(fast[0] * 3 < held[0], "java-fast, without a quota, is not held");

            // d.
            Properties c = props("java-slow");
            c.put("key.deserializer", ByteArrayDeserializer.class.getName());
            c.put("value.deserializer", ByteArrayDeserializer.class.getName());
            c.put("fetch.max.bytes", String.valueOf(FETCH_MAX));
            c.put("max.partition.fetch.bytes", String.valueOf(FETCH_MAX));
            double leastFetch = (double) (TOTAL - WINDOW_SECONDS * QUOTA - FETCH_MAX) / QUOTA * 0.9;
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
                TopicPartition tp = new TopicPartition("java-quota", 0);
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                long start = System.nanoTime();
                long bytes = 0;
                long deadline = System.currentTimeMillis() + 120_000;
                // Half of what the topic holds (produced twice): enough to go over the quota.
                while (bytes < TOTAL && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                    for (var r : records) {
                        bytes += r.value().length;
                    }
                }
                double seconds = (System.nanoTime() - start) / 1e9;
                double throttle = metric(consumer.metrics(), "fetch-throttle-time-max");
                System.out.printf("fetch: %d bytes in %.2f s (at least %.2f s), throttle max %.0f ms%n", bytes, seconds, leastFetch, throttle);
                check(bytes >= TOTAL, "java-slow read the records back");
                check(seconds >= leastFetch, "java-slow's fetches are held to its quota");
                check(throttle > 0, "java-slow's consumer saw throttle times");
            }

            // e.
            AclBinding deny = new AclBinding(
                new ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                new AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALTER_CONFIGS, AclPermissionType.DENY));
            // Once an ACL names the cluster, only ACLs open it: ALL allowed, ALTER_CONFIGS denied.
            AclBinding allow = new AclBinding(
                new ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                new AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.ALLOW));
            a.createAcls(List.of(allow, deny)).all().get();
            e = alterFails(a, set(bad, "producer_byte_rate", 1024.0));
            check(e instanceof ClusterAuthorizationException, "without ALTER_CONFIGS on the cluster, alterClientQuotas is refused: " + e);
            check(a.describeClientQuotas(ClientQuotaFilter.all()).entities().get().size() == 3, "describing still works");
            a.deleteAcls(List.of(deny.toFilter(), allow.toFilter())).all().get();

            // f.
            a.alterClientQuotas(List.of(new ClientQuotaAlteration(alice,
                List.of(new ClientQuotaAlteration.Op("request_percentage", null))))).all().get();
            all = a.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            check(!all.containsKey(alice) && all.size() == 2, "alice's removed quota is gone: " + all.keySet());
        }
        System.out.println("OK");
    }
}
