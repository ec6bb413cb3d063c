// A Kafka Java client (kafka-clients 3.9.1) workload for the snap-length tests
// (tests/test_snap_length.py): one producer sends RECORDS records of growing size (one frame spans
// many packets as it grows), values of small binary int32s, then one consumer reads them all back. Prints "produced N" and
// "consumed N" when done.
//
//     java -cp kafka-clients.jar:slf4j-api.jar SnapWorkload.java BOOTSTRAP TOPIC RECORDS
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class SnapWorkload {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int records = Integer.parseInt(args[2]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "snap-java-producer");
        p.put("linger.ms", "5");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < records; i++) {
                // Binary values of small int32s (as Avro or Protobuf payloads hold): after a cut, any
                // 4 bytes of them read as a plausible size prefix and correlation id.
                java.nio.ByteBuffer value = java.nio.ByteBuffer.allocate(100 + i * 997);
                for (int j = 0; value.remaining() >= 4; j++) value.putInt(j % 64);
                // Every few records one is awaited: several Produce requests are in flight between.
                java.util.concurrent.Future<?> sent =
                        producer.send(new ProducerRecord<>(topic, i % 2, ("k" + i).getBytes(), value.array()));
                if (i % 4 == 3) sent.get();
            }
        }
        System.out.println("produced " + records);
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("client.id", "snap-java-consumer");
        c.put("group.id", "snap-java-group");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        int consumed = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            while (consumed < records && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> got = consumer.poll(Duration.ofMillis(500));
                consumed += got.count();
            }
            consumer.commitSync();
        }
        System.out.println("consumed " + consumed);
    }
}
