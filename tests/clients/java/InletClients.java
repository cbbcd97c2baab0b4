// Inlet's Kafka endpoint and Schema Registry with the Java clients: Apache kafka-clients (4.3.0
// and 3.9.1: whichever is on the class path) and Confluent's KafkaAvroSerializer.
//
// Usage: java -cp CLASSES:LIBS/* InletClients BOOTSTRAP REGISTRY_URL
//
// Covers the AdminClient (cluster, topics, configs, partitions, groups; describeTopics in pages,
// describeProducers, describeLogDirs, listOffsets of the max timestamp), an idempotent producer
// with acks=all, a consumer group with manual commits that reads everything exactly once (and
// a second member that resumes at the committed position), and Avro records through the
// registry into a table topic. Prints what each step checked; exits 1 on the first mismatch,
// and prints OK at the end.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
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
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

@SuppressWarnings("removal")
public class InletClients {
    static final long TIMEOUT_S = 30;

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
        String registry = args[1];
        log("kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion()
                + ", bootstrap " + bootstrap);
        try (Admin admin = Admin.create(Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000))) {
            admin(admin);
            produceAndConsume(admin, bootstrap);
            avro(admin, bootstrap, registry);
        }
        log("OK");
    }

    static void admin(Admin admin) throws Exception {
        DescribeClusterResult cluster = admin.describeCluster();
        String id = cluster.clusterId().get(TIMEOUT_S, TimeUnit.SECONDS);
        Collection<Node> nodes = cluster.nodes().get(TIMEOUT_S, TimeUnit.SECONDS);
        Node controller = cluster.controller().get(TIMEOUT_S, TimeUnit.SECONDS);
        check(id != null && !id.isEmpty(), "describeCluster: no cluster id");
        check(!nodes.isEmpty(), "describeCluster: no nodes");
        check(controller != null, "describeCluster: no controller");
        log("describeCluster: id " + id + ", nodes " + nodes);

        admin.createTopics(List.of(
                new NewTopic("java-orders", 3, (short) 1),
                new NewTopic("java-configs", 1, (short) 1)
                        .configs(Map.of("retention.ms", "86400000"))))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
        Set<String> names = admin.listTopics().names().get(TIMEOUT_S, TimeUnit.SECONDS);
        check(names.containsAll(List.of("java-orders", "java-configs")), "listTopics: " + names);
        Map<String, TopicDescription> described = admin.describeTopics(List.of("java-orders"))
                .allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS);
        check(described.get("java-orders").partitions().size() == 3,
                "describeTopics: " + described);
        log("createTopics, listTopics, describeTopics: java-orders has 3 partitions");

        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, "java-configs");
        Config config = admin.describeConfigs(List.of(topic)).all()
                .get(TIMEOUT_S, TimeUnit.SECONDS).get(topic);
        check("86400000".equals(config.get("retention.ms").value()),
                "describeConfigs: retention.ms " + config.get("retention.ms"));
        admin.incrementalAlterConfigs(Map.of(topic, List.of(new AlterConfigOp(
                new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET))))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
        config = admin.describeConfigs(List.of(topic)).all()
                .get(TIMEOUT_S, TimeUnit.SECONDS).get(topic);
        check("3600000".equals(config.get("retention.ms").value()),
                "incrementalAlterConfigs: retention.ms " + config.get("retention.ms"));
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER,
                String.valueOf(nodes.iterator().next().id()));
        Config brokerConfig = admin.describeConfigs(List.of(broker),
                new DescribeConfigsOptions().includeDocumentation(true)).all()
                .get(TIMEOUT_S, TimeUnit.SECONDS).get(broker);
        ConfigEntry maxBytes = brokerConfig.get("message.max.bytes");
        check(maxBytes != null && "1048588".equals(maxBytes.value()),
                "describeConfigs(broker): " + brokerConfig);
        // Each broker setting carries its type and its documentation (one definition each).
        check(maxBytes.type() == ConfigEntry.ConfigType.INT
                && maxBytes.documentation() != null && !maxBytes.documentation().isEmpty(),
                "describeConfigs(broker) message.max.bytes type/documentation: " + maxBytes);
        ConfigEntry autoCreate = brokerConfig.get("auto.create.topics.enable");
        check(autoCreate != null && autoCreate.type() == ConfigEntry.ConfigType.BOOLEAN,
                "describeConfigs(broker) auto.create.topics.enable: " + autoCreate);
        check(brokerConfig.get("log.retention.ms").type() == ConfigEntry.ConfigType.LONG,
                "describeConfigs(broker) log.retention.ms: " + brokerConfig.get("log.retention.ms"));
        log("describeConfigs, incrementalAlterConfigs: retention.ms 86400000 -> 3600000");

        admin.createPartitions(Map.of("java-configs", NewPartitions.increaseTo(2)))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
        described = admin.describeTopics(List.of("java-configs"))
                .allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS);
        check(described.get("java-configs").partitions().size() == 2,
                "createPartitions: " + described);
        admin.deleteTopics(List.of("java-configs")).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        log("createPartitions 1 -> 2, deleteTopics");
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "zstd");
        return p;
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    static void produceAndConsume(Admin admin, String bootstrap) throws Exception {
        final int n = 3000;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(
                producerProps(bootstrap), new StringSerializer(), new StringSerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                sent.add(producer.send(new ProducerRecord<>("java-orders", "k" + i, "v" + i)));
            }
            for (Future<RecordMetadata> f : sent) {
                f.get(TIMEOUT_S, TimeUnit.SECONDS);
            }
        }
        log("idempotent producer (acks=all, zstd): " + n + " records acknowledged");
        describe(admin, n);

        Set<String> seen = new HashSet<>();
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(consumerProps(bootstrap, "java-group"))) {
            consumer.subscribe(List.of("java-orders"));
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    check(seen.add(r.value()), "consumed twice: " + r.value());
                    check(r.value().equals("v" + r.key().substring(1)), "key/value pair " + r);
                }
            }
            check(seen.size() == n, "consumed " + seen.size() + " of " + n);
            consumer.commitSync();
        }
        log("consumer group: " + n + " records exactly once, offsets committed");

        // listConsumerGroups: in 3.9 and 4.3 alike (4.x adds listGroups and deprecates this).
        @SuppressWarnings("removal")
        Collection<ConsumerGroupListing> groups = admin.listConsumerGroups().all()
                .get(TIMEOUT_S, TimeUnit.SECONDS);
        check(groups.stream().anyMatch(g -> g.groupId().equals("java-group")),
                "listConsumerGroups: " + groups);
        Map<TopicPartition, OffsetAndMetadata> committed = admin
                .listConsumerGroupOffsets("java-group").partitionsToOffsetAndMetadata()
                .get(TIMEOUT_S, TimeUnit.SECONDS);
        long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
        check(total == n, "committed offsets sum to " + total + ": " + committed);
        log("listConsumerGroups, listConsumerGroupOffsets: offsets sum to " + n);

        try (KafkaConsumer<String, String> again =
                new KafkaConsumer<>(consumerProps(bootstrap, "java-group"))) {
            again.subscribe(List.of("java-orders"));
            long deadline = System.currentTimeMillis() + 8_000;
            int extra = 0;
            while (System.currentTimeMillis() < deadline) {
                extra += again.poll(Duration.ofMillis(500)).count();
            }
            check(extra == 0, "a member resuming at the committed position read " + extra);
        }
        log("a second member of the group resumes at the committed position");

        // KIP-848's consumer protocol is not built: a consumer that asks for it must fail
        // clearly and soon, never hang.
        Properties next = consumerProps(bootstrap, "java-kip848");
        next.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        long started = System.currentTimeMillis();
        String failure = null;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(next)) {
            consumer.subscribe(List.of("java-orders"));
            while (failure == null && System.currentTimeMillis() - started < 30_000) {
                try {
                    consumer.poll(Duration.ofMillis(500));
                } catch (org.apache.kafka.common.errors.UnsupportedVersionException e) {
                    failure = e.getMessage();
                }
            }
        }
        long took = System.currentTimeMillis() - started;
        check(failure != null && failure.contains("CONSUMER") && took < 30_000,
                "group.protocol=consumer: " + failure + " after " + took + " ms");
        log("group.protocol=consumer fails clearly after " + took + " ms: " + failure);
    }

    // The describing APIs tools use: describeTopics in pages of one partition
    // (DescribeTopicPartitions' cursor), describeProducers, describeLogDirs, and listOffsets of
    // the max timestamp; `n` records were just produced to java-orders.
    static void describe(Admin admin, int n) throws Exception {
        Map<String, TopicDescription> paged = admin.describeTopics(List.of("java-orders"),
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(1))
                .allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS);
        List<TopicPartitionInfo> parts = paged.get("java-orders").partitions();
        check(parts.size() == 3 && parts.get(2).partition() == 2 && parts.get(0).leader() != null,
                "describeTopics one partition a page: " + paged);
        log("describeTopics, a partition a page: java-orders has 3 partitions with leaders");

        List<TopicPartition> tps = List.of(new TopicPartition("java-orders", 0),
                new TopicPartition("java-orders", 1), new TopicPartition("java-orders", 2));
        Map<TopicPartition, DescribeProducersResult.PartitionProducerState> producers =
                admin.describeProducers(tps).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        Set<Long> ids = new HashSet<>();
        int lastSequences = 0;
        for (DescribeProducersResult.PartitionProducerState state : producers.values()) {
            for (ProducerState p : state.activeProducers()) {
                ids.add(p.producerId());
                lastSequences += p.lastSequence() + 1;
            }
        }
        check(ids.size() == 1 && lastSequences == n,
                "describeProducers: one producer whose sequences cover " + n + ": " + producers);
        log("describeProducers: producer " + ids + ", last sequences cover " + n + " records");

        int broker = admin.describeCluster().nodes().get(TIMEOUT_S, TimeUnit.SECONDS)
                .iterator().next().id();
        Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(broker))
                .allDescriptions().get(TIMEOUT_S, TimeUnit.SECONDS);
        long bytes = 0;
        for (LogDirDescription dir : dirs.get(broker).values()) {
            for (Map.Entry<TopicPartition, ReplicaInfo> e : dir.replicaInfos().entrySet()) {
                if (e.getKey().topic().equals("java-orders")) {
                    bytes += e.getValue().size();
                }
            }
        }
        check(bytes > 0, "describeLogDirs: java-orders takes " + bytes + " bytes: " + dirs);
        log("describeLogDirs: java-orders takes " + bytes + " bytes");

        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> max = admin.listOffsets(
                Map.of(tps.get(0), OffsetSpec.maxTimestamp())).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        ListOffsetsResult.ListOffsetsResultInfo info = max.get(tps.get(0));
        check(info.offset() >= 0 && info.timestamp() > 0, "listOffsets(maxTimestamp): " + info);
        log("listOffsets(maxTimestamp): offset " + info.offset() + " at " + info.timestamp());
    }

    static final String ORDER = "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\","
            + "\"fields\":[{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"item\",\"type\":\"string\"},"
            + "{\"name\":\"total\",\"type\":{\"type\":\"bytes\",\"logicalType\":\"decimal\","
            + "\"precision\":12,\"scale\":2},\"default\":\"\\u0000\"}]}";

    static void avro(Admin admin, String bootstrap, String registry) throws Exception {
        admin.createTopics(List.of(new NewTopic("java-avro", 1, (short) 1)
                .configs(Map.of("table.topic.enable", "true"))))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
        Schema schema = new Schema.Parser().parse(ORDER);
        Map<String, Object> serde = new HashMap<>();
        serde.put("schema.registry.url", registry);
        Properties p = producerProps(bootstrap);
        p.put("schema.registry.url", registry);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG,
                "io.confluent.kafka.serializers.KafkaAvroSerializer");
        final int n = 50;
        try (KafkaProducer<String, Object> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                GenericRecord r = new GenericData.Record(schema);
                r.put("id", (long) i);
                r.put("item", "item-" + i);
                r.put("total", java.nio.ByteBuffer.wrap(new byte[] {0, (byte) i}));
                sent.add(producer.send(new ProducerRecord<>("java-avro", "k" + i, r)));
            }
            for (Future<RecordMetadata> f : sent) {
                f.get(TIMEOUT_S, TimeUnit.SECONDS);
            }
        }
        log("KafkaAvroSerializer: " + n + " records with a bytes decimal default to a table topic");

        Properties c = consumerProps(bootstrap, "java-avro-group");
        c.put("schema.registry.url", registry);
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                "io.confluent.kafka.serializers.KafkaAvroDeserializer");
        int seen = 0;
        try (KafkaConsumer<String, Object> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of("java-avro"));
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Object> r : consumer.poll(Duration.ofMillis(500))) {
                    GenericRecord g = (GenericRecord) r.value();
                    check(g.get("item").toString().equals("item-" + g.get("id")), "record " + g);
                    seen++;
                }
            }
        }
        check(seen == n, "KafkaAvroDeserializer read " + seen + " of " + n);
        log("KafkaAvroDeserializer: " + n + " records read back through the registry");
    }
}
