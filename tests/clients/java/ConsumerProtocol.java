// A consumer on KIP-848's group protocol (`group.protocol=consumer`, the 4.x clients' new
// protocol), which Inlet does not serve yet (issue 41): it must fail at its first polls with
// the client's clear error, not wait for an assignment that never comes. Prints `REFUSED:` and
// the error, then `OK`; exits 1 when the consumer polls on without an error for 30 s, or fails
// with another error.
//
// Arguments: the node's Kafka address, and the registry URL (unused).

import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ConsumerProtocol {
    public static void main(String[] args) {
        System.out.println("kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion()
                + ", bootstrap " + args[0]);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "kip-848");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        long start = System.nanoTime();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of("kip-848"));
            while (System.nanoTime() - start < Duration.ofSeconds(30).toNanos()) {
                consumer.poll(Duration.ofMillis(500));
            }
            System.out.println("FAILED: the consumer polled for 30 s without an error");
            System.exit(1);
        } catch (UnsupportedVersionException e) {
            long ms = (System.nanoTime() - start) / 1_000_000;
            System.out.println("REFUSED: after " + ms + " ms: " + e.getMessage());
        }
        System.out.println("OK");
    }
}
