// A Kafka Java client (kafka-clients 3.9.1) consumer with group.protocol=consumer (KIP-848), for
// tests/test_groups_java_consumer.py. Prints one JSON line per rebalance callback: the time (µs),
// the partitions the member owns after it, its member id and epoch (groupMetadata().generationId()
// is the member epoch under the consumer protocol). Stops once it has owned the whole topic
// `rounds` times, after polling three more seconds so its last heartbeat acknowledges that (a loaded
// machine can hold a 300 ms heartbeat back for over a second).
//   java -cp JARS Kip848Consumer.java BOOTSTRAP GROUP TOPIC PARTITIONS ROUNDS
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class Kip848Consumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("group.protocol", "consumer");
        props.put("client.id", "java-kip848");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        String topic = args[2];
        int partitions = Integer.parseInt(args[3]);
        int rounds = Integer.parseInt(args[4]);
        Set<Integer> owned = new TreeSet<>();
        int[] full = {0};
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                void report(String kind) {
                    ConsumerGroupMetadata meta = consumer.groupMetadata();
                    System.out.println("{\"kind\":\"" + kind + "\",\"us\":" + System.currentTimeMillis() * 1000
                        + ",\"owned\":" + owned + ",\"member\":\"" + meta.memberId()
                        + "\",\"epoch\":" + meta.generationId() + "}");
                    System.out.flush();
                }
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    for (TopicPartition p : parts) owned.remove(p.partition());
                    report("revoked");
                }
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    for (TopicPartition p : parts) owned.add(p.partition());
                    if (owned.size() == partitions) full[0]++;
                    report("assigned");
                }
            };
            consumer.subscribe(List.of(topic), listener);
            long deadline = System.currentTimeMillis() + 60_000, stop = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, stop)) {
                consumer.poll(Duration.ofMillis(100));
                if (full[0] >= rounds && stop == Long.MAX_VALUE) stop = System.currentTimeMillis() + 3000;
            }
        }
    }
}
