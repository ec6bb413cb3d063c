// The Kafka Java client's early-access share consumer (kafka-clients 3.9.1, KIP-932,
// ShareGroupHeartbeat/ShareFetch v0) for tests/test_groups_java_consumer.py: subscribes, polls for
// `seconds` (the test coordinator's fetches deliver nothing), then closes, which leaves the group.
//   java -cp JARS Kip932ShareConsumer.java BOOTSTRAP GROUP TOPIC SECONDS
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class Kip932ShareConsumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("client.id", "java-kip932");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            // poll() may block past its timeout; a timer wakes it up when the time is over.
            Timer timer = new Timer(true);
            timer.schedule(new TimerTask() {
                public void run() { consumer.wakeup(); }
            }, Long.parseLong(args[3]) * 1000);
            while (true) {
                try {
                    consumer.poll(Duration.ofMillis(200));
                } catch (WakeupException e) {
                    break;
                }
            }
            consumer.close(Duration.ofSeconds(5));
        }
        System.out.println("{\"closed\":true}");
    }
}
