// The Kafka Java client's early-access share consumer (kafka-clients 3.9.1, KIP-932,
// ShareGroupHeartbeat/ShareFetch v0) for tests/test_groups_java_consumer.py: subscribes, polls until
// the member has taken its assignment, then for `seconds` more (the test coordinator's fetches deliver
// nothing), then closes, which leaves the group.
//   java -cp JARS Kip932ShareConsumer.java BOOTSTRAP GROUP TOPIC SECONDS
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
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
            // The seconds count from the member's first reconciled assignment (the coordinator metric
            // rebalance-total), not from subscribe: joining alone takes about a second, more on a loaded
            // machine, and a close before the join completes leaves no heartbeat between join and leave.
            long joinDeadline = System.nanoTime() + 30_000_000_000L;
            while (rebalances(consumer) < 1 && System.nanoTime() < joinDeadline) {
                consumer.poll(Duration.ofMillis(100));
            }
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

    static double rebalances(KafkaShareConsumer<?, ?> consumer) {
        for (Map.Entry<MetricName, ? extends Metric> entry : consumer.metrics().entrySet()) {
            MetricName name = entry.getKey();
            if (name.group().equals("consumer-share-coordinator-metrics") && name.name().equals("rebalance-total")) {
                return ((Number) entry.getValue().metricValue()).doubleValue();
            }
        }
        return 0;
    }
}
