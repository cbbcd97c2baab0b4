// Apache kafka-clients (whichever is on the class path) against an Inlet cluster while the
// test kills one of its nodes.
//
// Usage: java -cp CLASSES:LIBS/* ClusterClients BOOTSTRAP TOPIC PARTITIONS N RATE
//
// 1. The AdminClient sees every node (describeCluster) and creates TOPIC.
// 2. An idempotent acks=all producer sends N records `j0` .. `j<N-1>` (key = value) round robin
//    over the partitions, about RATE a second, and prints `acked K` at each tenth acknowledged,
//    so the test can kill a node in the middle. Every send must be acknowledged.
// 3. A consumer group reads the topic from the start: every acknowledged record exactly once,
//    at the partition and offset its acknowledgement gave; it commits, and the AdminClient
//    reads the group's committed offsets back (through the group's coordinator, wherever it
//    is now) and lists the group exactly once.
// Prints what each step checked; exits 1 on the first mismatch, and prints OK at the end.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClusterClients {
    static final long TIMEOUT_S = 60;

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.out.flush();
            System.exit(1);
        }
    }

    static void log(String msg) {
        System.out.println(msg);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int n = Integer.parseInt(args[3]);
        double rate = Double.parseDouble(args[4]);
        log("kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion()
                + ", bootstrap " + bootstrap);
        try (Admin admin = Admin.create(Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 60000))) {
            Collection<Node> nodes = admin.describeCluster().nodes()
                    .get(TIMEOUT_S, TimeUnit.SECONDS);
            check(nodes.size() >= 3, "describeCluster: " + nodes);
            log("describeCluster: " + nodes.size() + " nodes");
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)))
                    .all().get(TIMEOUT_S, TimeUnit.SECONDS);

            Map<String, long[]> acked = produce(bootstrap, topic, partitions, n, rate);
            String group = "java-cluster";
            consume(bootstrap, topic, group, acked);
            Map<TopicPartition, OffsetAndMetadata> committed = admin
                    .listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(TIMEOUT_S, TimeUnit.SECONDS);
            long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            check(total == n, "listConsumerGroupOffsets: " + committed);
            long listed = admin.listConsumerGroups().all().get(TIMEOUT_S, TimeUnit.SECONDS)
                    .stream().filter(g -> g.groupId().equals(group)).count();
            check(listed == 1, "listConsumerGroups lists the group " + listed + " times");
            log("listConsumerGroupOffsets: " + total + " committed; listConsumerGroups: once");
        }
        log("OK");
    }

    /** Sends the records; returns each value's acknowledged (partition, offset). */
    static Map<String, long[]> produce(String bootstrap, String topic, int partitions, int n,
            double rate) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Map<String, long[]> acked = new HashMap<>();
        AtomicInteger count = new AtomicInteger();
        List<Future<RecordMetadata>> sends = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            long start = System.nanoTime();
            for (int i = 0; i < n; i++) {
                long due = start + (long) (i / rate * 1e9);
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                String value = "j" + i;
                sends.add(producer.send(new ProducerRecord<>(topic, i % partitions, value, value),
                        (m, e) -> {
                            if (e == null && count.incrementAndGet() % Math.max(1, n / 10) == 0) {
                                log("acked " + count.get());
                            }
                        }));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata m;
                try {
                    m = sends.get(i).get(TIMEOUT_S, TimeUnit.SECONDS);
                } catch (Exception e) {
                    check(false, "j" + i + " was not acknowledged: " + e);
                    return acked;
                }
                acked.put("j" + i, new long[] {m.partition(), m.offset()});
            }
        }
        log("produced: " + acked.size() + " acknowledged");
        return acked;
    }

    /** Reads the topic through a group until every acknowledged record is read; commits. */
    static void consume(String bootstrap, String topic, String group, Map<String, long[]> acked) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        Map<String, Long> seen = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TIMEOUT_S * 3 * 1_000_000_000L;
            while (seen.size() < acked.size()) {
                check(System.nanoTime() < deadline,
                        "read " + seen.size() + " of " + acked.size() + " records");
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    long[] at = acked.get(r.value());
                    check(at != null, "a record never acknowledged: " + r);
                    check(r.value().equals(r.key()), "key and value differ: " + r);
                    check(seen.put(r.value(), r.offset()) == null, r.value() + " read twice");
                    check(at[0] == r.partition() && at[1] == r.offset(),
                            r.value() + " at " + r.partition() + "-" + r.offset()
                                    + ", acknowledged at " + at[0] + "-" + at[1]);
                }
            }
            consumer.commitSync(Duration.ofSeconds(TIMEOUT_S));
        }
        log("consumed: every acknowledged record once, at its offset");
    }
}
