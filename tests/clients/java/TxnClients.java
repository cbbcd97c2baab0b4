// Kafka transactions through Inlet with the Java clients: Apache kafka-clients (4.3.0 and
// 3.9.1: whichever is on the class path).
//
// Usage: java -cp CLASSES:LIBS/* TxnClients BOOTSTRAP
//
// The node runs with the Kafka settings group.initial.rebalance.delay.ms=0,
// transaction.abort.timed.out.transaction.cleanup.interval.ms=500 and
// transaction.max.timeout.ms=60000. Each case is one method:
//   a. A transactional producer commits, aborts and commits again across 3 partitions: a
//      read_committed consumer reads exactly the committed records, in order per partition; a
//      read_uncommitted one reads the aborted ones too; neither sees a control record. The
//      read_committed end offset (the last stable offset) and position equal the log end, which
//      counts one marker per transaction and partition.
//   b. An open transaction holds read_committed back: neither its record nor a later
//      non-transactional one is visible to read_committed (the consumer's and the AdminClient's
//      read_committed end offset stays at the transaction's first offset), read_uncommitted sees
//      both, and after the commit read_committed sees both.
//   c. Read-process-write: a consumer group's input goes to an output topic in transactions
//      that carry the group's offsets (sendOffsetsToTransaction with the group's metadata); the
//      committed offsets (AdminClient) follow the commits, an aborted transaction leaves them
//      unchanged (a new member resumes before its input), and read_committed output holds only
//      the committed outputs.
//   d. Zombie fencing: a second producer with the same transactional.id fences the first,
//      whose commit fails with ProducerFencedException (or InvalidProducerEpochException); its
//      open records never reach read_committed, and the new producer commits.
//   e. Transaction timeout: the broker aborts a transaction open longer than its
//      transaction.timeout.ms (3 s); read_committed then reads past it to a later committed
//      record, and the timed-out producer's commit fails.
//   f. transaction.timeout.ms above the broker's transaction.max.timeout.ms: initTransactions
//      fails with InvalidTxnTimeoutException's error, soon, not after a hang.
// Every wait has a deadline. Prints what each step checked; exits 1 on the first mismatch
// (a line starting FAILED), and prints OK at the end.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.InvalidTxnTimeoutException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public class TxnClients {
    /** Bound on each client call that waits for the broker (admin futures, max.block.ms). */
    static final long TIMEOUT_S = 30;

    static final String THREE = "txn-three";
    static final String OPEN = "txn-open";
    static final String RPW_IN = "txn-rpw-in";
    static final String RPW_OUT = "txn-rpw-out";
    static final String RPW_GROUP = "txn-rpw";
    static final String FENCE = "txn-fence";
    static final String TIMED_OUT = "txn-timeout";

    static final String READ_COMMITTED = "read_committed";
    static final String READ_UNCOMMITTED = "read_uncommitted";

    interface Case {
        void run() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        log("kafka-clients " + AppInfoParser.getVersion() + ", bootstrap " + bootstrap);
        try (Admin admin = Admin.create(Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000))) {
            admin.createTopics(List.of(
                    new NewTopic(THREE, 3, (short) 1),
                    new NewTopic(OPEN, 1, (short) 1),
                    new NewTopic(RPW_IN, 2, (short) 1),
                    new NewTopic(RPW_OUT, 2, (short) 1),
                    new NewTopic(FENCE, 1, (short) 1),
                    new NewTopic(TIMED_OUT, 1, (short) 1)))
                    .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            run("a. commit and abort across 3 partitions", () -> commitAndAbort(bootstrap));
            run("b. an open transaction holds read_committed back",
                    () -> openTransaction(admin, bootstrap));
            run("c. read-process-write with the group's offsets",
                    () -> readProcessWrite(admin, bootstrap));
            run("d. zombie fencing", () -> zombieFencing(bootstrap));
            run("e. the broker aborts a timed-out transaction", () -> transactionTimeout(bootstrap));
            run("f. transaction.timeout.ms above transaction.max.timeout.ms",
                    () -> timeoutAboveMax(bootstrap));
        }
        log("OK");
    }

    // a. Three transactions across 3 partitions: commit, abort, commit.
    static void commitAndAbort(String bootstrap) throws Exception {
        final int partitions = 3;
        final int first = 30;
        final int aborted = 15;
        final int third = 9;
        try (KafkaProducer<String, String> producer =
                transactional(bootstrap, "txn-commit-abort", 0)) {
            producer.initTransactions();
            producer.beginTransaction();
            sendAll(producer, THREE, partitions, "commit1-", first);
            producer.commitTransaction();
            producer.beginTransaction();
            // Flushed first, so the aborted records are in the log (read_uncommitted sees them).
            List<Future<RecordMetadata>> sent = sendAll(producer, THREE, partitions, "abort2-", aborted);
            producer.flush();
            acknowledged(sent, "the records of the aborted transaction");
            producer.abortTransaction();
            producer.beginTransaction();
            sendAll(producer, THREE, partitions, "commit3-", third);
            producer.commitTransaction();
        }
        log("a. committed " + first + ", aborted " + aborted + ", committed " + third
                + " records over " + partitions + " partitions");

        Read committed = readCaughtUp(bootstrap, READ_COMMITTED, THREE, partitions,
                first + third, 30_000);
        Read uncommitted = readCaughtUp(bootstrap, READ_UNCOMMITTED, THREE, partitions,
                first + aborted + third, 30_000);
        for (int p = 0; p < partitions; p++) {
            List<String> commits = values("commit1-", first, partitions, p);
            commits.addAll(values("commit3-", third, partitions, p));
            List<String> all = values("commit1-", first, partitions, p);
            all.addAll(values("abort2-", aborted, partitions, p));
            all.addAll(values("commit3-", third, partitions, p));
            check(committed.at(p).equals(commits), "read_committed partition " + p + " read "
                    + committed.at(p) + ", but the committed records are " + commits);
            check(uncommitted.at(p).equals(all), "read_uncommitted partition " + p + " read "
                    + uncommitted.at(p) + ", but the records written are " + all);
            // Each of the 3 transactions ends with one control record in every partition.
            long logEnd = all.size() + 3;
            check(uncommitted.end(p) == logEnd, "read_uncommitted end offset of partition " + p
                    + " is " + uncommitted.end(p) + ", not " + all.size() + " records + 3 markers: "
                    + uncommitted);
            check(committed.end(p) == logEnd, "read_committed end offset (last stable offset) of "
                    + "partition " + p + " is " + committed.end(p) + ", not the log end " + logEnd
                    + " though every transaction ended: " + committed);
            check(committed.position(p) == logEnd, "read_committed position in partition " + p
                    + " is " + committed.position(p) + " after reading everything, not the log end "
                    + logEnd + ": " + committed);
        }
        log("a. read_committed read the " + (first + third) + " committed records in order, "
                + "read_uncommitted all " + (first + aborted + third) + ", no control records");
        log("a. read_committed end offsets and positions " + committed.ends.values()
                + " = the log ends (records + 3 markers each)");
    }

    // b. An open transaction, then a non-transactional record in the same partition.
    static void openTransaction(Admin admin, String bootstrap) throws Exception {
        TopicPartition tp = new TopicPartition(OPEN, 0);
        long first;
        try (KafkaProducer<String, String> producer = transactional(bootstrap, "txn-open", 0);
                KafkaProducer<String, String> plain = new KafkaProducer<>(producerProps(bootstrap))) {
            producer.initTransactions();
            producer.beginTransaction();
            Future<RecordMetadata> inTxn = producer.send(new ProducerRecord<>(OPEN, 0, "k", "in-txn"));
            producer.flush();
            first = inTxn.get(TIMEOUT_S, TimeUnit.SECONDS).offset();
            long after = plain.send(new ProducerRecord<>(OPEN, 0, "k", "plain"))
                    .get(TIMEOUT_S, TimeUnit.SECONDS).offset();
            check(after == first + 1, "the non-transactional record is at offset " + after
                    + ", not right after the open transaction's record at " + first);
            log("b. open transaction's record at offset " + first + ", non-transactional at " + after);

            Read held = readFor(bootstrap, READ_COMMITTED, OPEN, 1, 3_000);
            check(held.total() == 0, "read_committed read " + held.at(0)
                    + " while a transaction before them is open");
            check(held.end(0) == first && held.position(0) == first, "with a transaction open "
                    + "from offset " + first + ", read_committed's end offset and position should "
                    + "stay there: " + held);
            long stable = latest(admin, tp, IsolationLevel.READ_COMMITTED);
            long high = latest(admin, tp, IsolationLevel.READ_UNCOMMITTED);
            check(stable == first && high == after + 1, "AdminClient listOffsets(latest): "
                    + "read_committed " + stable + " (expected " + first + "), read_uncommitted "
                    + high + " (expected " + (after + 1) + ")");
            log("b. for 3 s read_committed saw nothing; its end offset stays at " + first
                    + " (AdminClient too), the high watermark is " + high);

            Read dirty = readCaughtUp(bootstrap, READ_UNCOMMITTED, OPEN, 1, 2, 15_000);
            check(dirty.at(0).equals(List.of("in-txn", "plain")),
                    "read_uncommitted with the transaction open: " + dirty);
            log("b. read_uncommitted sees both: " + dirty.at(0));

            producer.commitTransaction();
        }
        Read done = readCaughtUp(bootstrap, READ_COMMITTED, OPEN, 1, 2, 15_000);
        check(done.at(0).equals(List.of("in-txn", "plain")),
                "read_committed after the commit: " + done);
        check(done.end(0) == first + 3 && done.position(0) == first + 3, "after the commit "
                + "read_committed's end offset and position should be " + (first + 3)
                + " (2 records + 1 marker): " + done);
        log("b. after the commit read_committed sees both: " + done.at(0));
    }

    // c. Consume, transform, produce with the group's offsets in the transaction.
    static void readProcessWrite(Admin admin, String bootstrap) throws Exception {
        final int partitions = 2;
        final int n = 20;
        final int late = 6;
        produce(bootstrap, RPW_IN, partitions, "in-", n);
        try (KafkaProducer<String, String> producer =
                transactional(bootstrap, "txn-rpw-producer", 0)) {
            producer.initTransactions();
            Map<TopicPartition, Long> processed;
            try (KafkaConsumer<String, String> consumer = groupMember(bootstrap)) {
                consumer.subscribe(List.of(RPW_IN));
                int transactions = 0;
                int count = 0;
                long deadline = System.currentTimeMillis() + 60_000;
                while (count < n && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                    if (records.isEmpty()) {
                        continue;
                    }
                    List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                    records.forEach(batch::add);
                    producer.beginTransaction();
                    transform(producer, batch, "out-");
                    producer.sendOffsetsToTransaction(nextOffsets(batch), consumer.groupMetadata());
                    producer.commitTransaction();
                    count += batch.size();
                    transactions++;
                }
                check(count == n, "the group member processed " + count + " of " + n
                        + " input records within 60 s");
                processed = positions(consumer, RPW_IN, partitions);
                check(processed.values().stream().allMatch(o -> o == n / partitions),
                        "positions after processing every input record: " + processed);
                awaitGroupOffsets(admin, processed, "after " + transactions + " committed transactions");
                log("c. " + n + " records processed in " + transactions + " committed transactions;"
                        + " the group's committed offsets equal the positions " + processed);

                // Input processed in a transaction that aborts: the offsets must not move.
                produce(bootstrap, RPW_IN, partitions, "late-", late);
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                deadline = System.currentTimeMillis() + 30_000;
                while (batch.size() < late && System.currentTimeMillis() < deadline) {
                    consumer.poll(Duration.ofMillis(500)).forEach(batch::add);
                }
                check(batch.size() == late, "the group member read " + batch.size() + " of the "
                        + late + " late input records within 30 s");
                producer.beginTransaction();
                transform(producer, batch, "aborted-");
                producer.sendOffsetsToTransaction(nextOffsets(batch), consumer.groupMetadata());
                producer.flush();
                producer.abortTransaction();
                // The abort's markers are written after abortTransaction returns in Kafka; give a
                // wrong commit of the offsets time to show.
                Thread.sleep(1_000);
                Map<TopicPartition, Long> after = groupOffsets(admin);
                check(after.equals(processed), "an aborted transaction moved the group's "
                        + "committed offsets from " + processed + " to " + after);
                log("c. an aborted transaction with offsets " + offsetsOf(nextOffsets(batch))
                        + " left the committed offsets at " + after);
            }

            // A new member resumes at the committed offsets: before the aborted batch's input.
            try (KafkaConsumer<String, String> consumer = groupMember(bootstrap)) {
                consumer.subscribe(List.of(RPW_IN));
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 30_000;
                while (batch.size() < late && System.currentTimeMillis() < deadline) {
                    consumer.poll(Duration.ofMillis(500)).forEach(batch::add);
                }
                List<String> seen = new ArrayList<>();
                batch.forEach(r -> seen.add(r.value()));
                seen.sort(null);
                List<String> expected = values("late-", late, 1, 0);
                expected.sort(null);
                check(seen.equals(expected), "a new member of the group, after the aborted "
                        + "transaction, read " + seen + " instead of the unprocessed " + expected);
                producer.beginTransaction();
                transform(producer, batch, "out-");
                producer.sendOffsetsToTransaction(nextOffsets(batch), consumer.groupMetadata());
                producer.commitTransaction();
                Map<TopicPartition, Long> end = positions(consumer, RPW_IN, partitions);
                check(end.values().stream().allMatch(o -> o == (n + late) / partitions),
                        "positions after processing the late records: " + end);
                awaitGroupOffsets(admin, end, "after the new member's committed transaction");
                log("c. a new member resumed at the committed offsets, reprocessed the " + late
                        + " late records and committed offsets " + end);
            }
        }

        Read output = readCaughtUp(bootstrap, READ_COMMITTED, RPW_OUT, partitions, n + late, 30_000);
        for (int p = 0; p < partitions; p++) {
            List<String> expected = values("out-in-", n, partitions, p);
            expected.addAll(values("out-late-", late, partitions, p));
            check(output.at(p).equals(expected), "read_committed output partition " + p + " read "
                    + output.at(p) + ", but the committed outputs are " + expected);
        }
        Read everything = readCaughtUp(bootstrap, READ_UNCOMMITTED, RPW_OUT, partitions,
                n + 2 * late, 30_000);
        long abortedOutputs = everything.all().stream().filter(v -> v.startsWith("aborted-")).count();
        check(abortedOutputs == late && everything.total() == n + 2 * late,
                "read_uncommitted output should hold the " + late + " aborted outputs too: "
                + everything);
        log("c. read_committed output holds exactly the " + (n + late) + " committed outputs; "
                + "read_uncommitted also the " + late + " aborted ones");
    }

    // d. Producer B with the same transactional.id fences producer A.
    static void zombieFencing(String bootstrap) throws Exception {
        final int n = 5;
        KafkaProducer<String, String> zombie = transactional(bootstrap, "txn-zombie", 0);
        try {
            zombie.initTransactions();
            zombie.beginTransaction();
            List<Future<RecordMetadata>> sent = sendAll(zombie, FENCE, 1, "zombie-", n);
            zombie.flush();
            acknowledged(sent, "the zombie's records");
            log("d. producer A began a transaction and wrote " + n + " records");

            try (KafkaProducer<String, String> successor =
                    transactional(bootstrap, "txn-zombie", 0)) {
                successor.initTransactions();
                log("d. producer B initialized the same transactional.id");

                Exception failure = null;
                try {
                    zombie.commitTransaction();
                } catch (Exception e) {
                    failure = e;
                }
                check(failure != null, "producer A committed after producer B initialized its "
                        + "transactional.id: it was not fenced");
                Throwable fenced = cause(failure, ProducerFencedException.class);
                if (fenced == null) {
                    fenced = cause(failure, InvalidProducerEpochException.class);
                }
                check(fenced != null, "producer A's commit failed, but not with "
                        + "ProducerFencedException or InvalidProducerEpochException: "
                        + chain(failure));
                log("d. producer A's commit failed with " + fenced.getClass().getName()
                        + " (thrown as " + failure.getClass().getName() + ")");

                successor.beginTransaction();
                sendAll(successor, FENCE, 1, "successor-", n);
                successor.commitTransaction();
                log("d. producer B committed " + n + " records");
            }
        } finally {
            zombie.close(Duration.ofSeconds(5));
        }

        Read committed = readCaughtUp(bootstrap, READ_COMMITTED, FENCE, 1, n, 30_000);
        List<String> successor = values("successor-", n, 1, 0);
        check(committed.at(0).equals(successor), "read_committed should read only producer B's "
                + "records " + successor + ": " + committed);
        Read uncommitted = readCaughtUp(bootstrap, READ_UNCOMMITTED, FENCE, 1, 2 * n, 30_000);
        List<String> all = values("zombie-", n, 1, 0);
        all.addAll(successor);
        check(uncommitted.at(0).equals(all), "read_uncommitted should read A's records and "
                + "then B's " + all + ": " + uncommitted);
        log("d. read_committed reads only B's records; A's are in the log but aborted");
    }

    // e. A transaction left open past its transaction.timeout.ms.
    static void transactionTimeout(String bootstrap) throws Exception {
        final int n = 3;
        final int timeoutMs = 3_000;
        KafkaProducer<String, String> stale = transactional(bootstrap, "txn-stale", timeoutMs);
        try {
            stale.initTransactions();
            stale.beginTransaction();
            List<Future<RecordMetadata>> sent = sendAll(stale, TIMED_OUT, 1, "timed-out-", n);
            stale.flush();
            acknowledged(sent, "the records of the transaction left open");
            long flushed = System.currentTimeMillis();
            log("e. a producer with transaction.timeout.ms=" + timeoutMs + " wrote " + n
                    + " records in a transaction it leaves open");

            try (KafkaProducer<String, String> next = transactional(bootstrap, "txn-after-stale", 0)) {
                next.initTransactions();
                next.beginTransaction();
                next.send(new ProducerRecord<>(TIMED_OUT, 0, "k", "after-timeout"));
                next.commitTransaction();
            }
            Read read = readCaughtUp(bootstrap, READ_COMMITTED, TIMED_OUT, 1, 1,
                    flushed + 20_000 - System.currentTimeMillis());
            long took = System.currentTimeMillis() - flushed;
            check(read.at(0).equals(List.of("after-timeout")), "within 20 s of the timed-out "
                    + "transaction's flush, read_committed should read only the record committed "
                    + "after it: " + read);
            check(took >= timeoutMs - 1_000, "read_committed read past the open transaction "
                    + took + " ms after its flush, before its " + timeoutMs + " ms timeout");
            log("e. " + took + " ms after the flush, read_committed read past the aborted "
                    + "transaction to " + read.at(0));

            Exception failure = null;
            try {
                stale.commitTransaction();
            } catch (Exception e) {
                failure = e;
            }
            check(failure != null, "the broker committed a transaction it should have aborted "
                    + "after its " + timeoutMs + " ms timeout");
            check(cause(failure, TimeoutException.class) == null, "commitTransaction of the "
                    + "timed-out transaction got no answer: " + chain(failure));
            log("e. the timed-out producer's commitTransaction failed with "
                    + failure.getClass().getName() + ": " + failure.getMessage());
        } finally {
            stale.close(Duration.ofSeconds(5));
        }
    }

    // f. A transaction timeout above the broker's transaction.max.timeout.ms (60000).
    static void timeoutAboveMax(String bootstrap) throws Exception {
        final int timeoutMs = 120_000;
        KafkaProducer<String, String> producer = transactional(bootstrap, "txn-too-long", timeoutMs);
        try {
            long started = System.currentTimeMillis();
            Exception failure = null;
            try {
                producer.initTransactions();
            } catch (Exception e) {
                failure = e;
            }
            long took = System.currentTimeMillis() - started;
            check(failure != null, "initTransactions with transaction.timeout.ms=" + timeoutMs
                    + " succeeded, above the broker's transaction.max.timeout.ms=60000");
            check(cause(failure, TimeoutException.class) == null, "initTransactions with "
                    + "transaction.timeout.ms=" + timeoutMs + " got no answer within "
                    + took + " ms: " + chain(failure));
            check(cause(failure, InvalidTxnTimeoutException.class) != null
                    || chain(failure).contains(Errors.INVALID_TRANSACTION_TIMEOUT.message()),
                    "initTransactions with transaction.timeout.ms=" + timeoutMs + " failed, but "
                    + "not with INVALID_TRANSACTION_TIMEOUT: " + chain(failure));
            log("f. initTransactions failed after " + took + " ms: " + chain(failure));
        } finally {
            producer.close(Duration.ofSeconds(5));
        }
    }

    // ---- clients

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        // Bounds initTransactions, commitTransaction, abortTransaction and flush.
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(TIMEOUT_S * 1000));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(TIMEOUT_S * 1000));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    /** A transactional producer, not initialized; timeoutMs 0 keeps transaction.timeout.ms's
     *  default (60 s). */
    static KafkaProducer<String, String> transactional(String bootstrap, String id, int timeoutMs) {
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
        if (timeoutMs > 0) {
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(timeoutMs));
        }
        return new KafkaProducer<>(p);
    }

    static Properties consumerProps(String bootstrap, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(TIMEOUT_S * 1000));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    /** A read_committed member of case c's group, a few records a poll (several transactions). */
    static KafkaConsumer<String, String> groupMember(String bootstrap) {
        Properties p = consumerProps(bootstrap, READ_COMMITTED);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, RPW_GROUP);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "7");
        return new KafkaConsumer<>(p);
    }

    // ---- producing

    /** The values `prefix + i` for i < n that go to `partition` of `partitions` (i % partitions). */
    static List<String> values(String prefix, int n, int partitions, int partition) {
        List<String> out = new ArrayList<>();
        for (int i = partition; i < n; i += partitions) {
            out.add(prefix + i);
        }
        return out;
    }

    /** Sends `prefix + i` for i < n, to partition i % partitions. */
    static List<Future<RecordMetadata>> sendAll(KafkaProducer<String, String> producer,
            String topic, int partitions, String prefix, int n) {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, prefix + i)));
        }
        return sent;
    }

    /** Waits for every send to be acknowledged; fails naming `what` otherwise. */
    static void acknowledged(List<Future<RecordMetadata>> sent, String what) {
        for (Future<RecordMetadata> f : sent) {
            try {
                f.get(TIMEOUT_S, TimeUnit.SECONDS);
            } catch (Exception e) {
                check(false, what + " were not acknowledged: " + chain(e));
            }
        }
    }

    /** Non-transactional records, acknowledged. */
    static void produce(String bootstrap, String topic, int partitions, String prefix, int n)
            throws Exception {
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap))) {
            acknowledged(sendAll(producer, topic, partitions, prefix, n), topic);
        }
    }

    /** Writes `prefix + value` of each input record to the same partition of the output. */
    static void transform(KafkaProducer<String, String> producer,
            List<ConsumerRecord<String, String>> batch, String prefix) {
        for (ConsumerRecord<String, String> r : batch) {
            producer.send(new ProducerRecord<>(RPW_OUT, r.partition(), r.key(), prefix + r.value()));
        }
    }

    /** The offsets to commit after `batch`: one past its last record in each partition. */
    static Map<TopicPartition, OffsetAndMetadata> nextOffsets(List<ConsumerRecord<String, String>> batch) {
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        for (ConsumerRecord<String, String> r : batch) {
            TopicPartition tp = new TopicPartition(r.topic(), r.partition());
            OffsetAndMetadata seen = next.get(tp);
            if (seen == null || seen.offset() <= r.offset()) {
                next.put(tp, new OffsetAndMetadata(r.offset() + 1));
            }
        }
        return next;
    }

    // ---- reading

    /** What a consumer read from a topic's partitions, and where it stopped. */
    static final class Read {
        final Map<Integer, List<String>> values = new TreeMap<>();
        final Map<Integer, Long> positions = new TreeMap<>();
        final Map<Integer, Long> ends = new TreeMap<>();

        List<String> at(int partition) {
            return values.getOrDefault(partition, List.of());
        }

        List<String> all() {
            List<String> out = new ArrayList<>();
            values.values().forEach(out::addAll);
            return out;
        }

        int total() {
            return all().size();
        }

        long position(int partition) {
            return positions.getOrDefault(partition, -1L);
        }

        long end(int partition) {
            return ends.getOrDefault(partition, -1L);
        }

        @Override
        public String toString() {
            return "read " + values + ", positions " + positions + ", end offsets " + ends;
        }
    }

    /** Reads `topic` from the beginning until at least `expected` records came and every
     *  partition's position reached the consumer's end offset (for read_committed the last
     *  stable offset), or waitMs passed; the caller checks what came. */
    static Read readCaughtUp(String bootstrap, String isolation, String topic, int partitions,
            int expected, long waitMs) {
        return read(bootstrap, isolation, topic, partitions, expected, waitMs);
    }

    /** Reads `topic` from the beginning for `millis`. */
    static Read readFor(String bootstrap, String isolation, String topic, int partitions,
            long millis) {
        return read(bootstrap, isolation, topic, partitions, -1, millis);
    }

    private static Read read(String bootstrap, String isolation, String topic, int partitions,
            int expected, long waitMs) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        Read read = new Read();
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(consumerProps(bootstrap, isolation))) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + waitMs;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    read.values.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
                }
                if (expected >= 0 && read.total() >= expected && caughtUp(consumer, tps)) {
                    break;
                }
            }
            consumer.endOffsets(tps).forEach((tp, end) -> read.ends.put(tp.partition(), end));
            for (TopicPartition tp : tps) {
                read.positions.put(tp.partition(), consumer.position(tp));
            }
        }
        return read;
    }

    static boolean caughtUp(KafkaConsumer<String, String> consumer, List<TopicPartition> tps) {
        Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
        return tps.stream().allMatch(tp -> consumer.position(tp) >= ends.get(tp));
    }

    static Map<TopicPartition, Long> positions(KafkaConsumer<String, String> consumer,
            String topic, int partitions) {
        Map<TopicPartition, Long> out = new HashMap<>();
        for (int p = 0; p < partitions; p++) {
            TopicPartition tp = new TopicPartition(topic, p);
            out.put(tp, consumer.position(tp));
        }
        return out;
    }

    // ---- group offsets and list offsets

    static Map<TopicPartition, Long> offsetsOf(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<TopicPartition, Long> out = new HashMap<>();
        offsets.forEach((tp, o) -> out.put(tp, o == null ? -1 : o.offset()));
        return out;
    }

    static Map<TopicPartition, Long> groupOffsets(Admin admin) throws Exception {
        return offsetsOf(admin.listConsumerGroupOffsets(RPW_GROUP).partitionsToOffsetAndMetadata()
                .get(TIMEOUT_S, TimeUnit.SECONDS));
    }

    /** Waits up to 10 s for the group's committed offsets to equal `expected` (Kafka makes
     *  offsets committed in a transaction visible when the commit's markers are written). */
    static void awaitGroupOffsets(Admin admin, Map<TopicPartition, Long> expected, String when)
            throws Exception {
        long deadline = System.currentTimeMillis() + 10_000;
        Map<TopicPartition, Long> committed = groupOffsets(admin);
        while (!committed.equals(expected) && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
            committed = groupOffsets(admin);
        }
        check(committed.equals(expected), "the group's committed offsets " + when + " are "
                + committed + ", not the processed positions " + expected);
    }

    static long latest(Admin admin, TopicPartition tp, IsolationLevel level) throws Exception {
        return admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(level))
                .partitionResult(tp).get(TIMEOUT_S, TimeUnit.SECONDS).offset();
    }

    // ---- checks

    /** The first exception of `type` in e's chain of causes, or null. */
    static Throwable cause(Throwable e, Class<? extends Throwable> type) {
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (type.isInstance(t)) {
                return t;
            }
        }
        return null;
    }

    /** e and its causes: `Class: message <- Class: message`. */
    static String chain(Throwable e) {
        StringBuilder out = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (out.length() > 0) {
                out.append(" <- ");
            }
            out.append(t.getClass().getName()).append(": ").append(t.getMessage());
        }
        return out.toString();
    }

    /** Runs one case; an exception fails the program with the case's name. */
    static void run(String name, Case body) {
        log("== " + name);
        try {
            body.run();
        } catch (Exception e) {
            e.printStackTrace(System.out);
            check(false, name + ": " + chain(e));
        }
    }

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
}
