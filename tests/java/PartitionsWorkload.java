// A Kafka Java client (kafka-clients 3.9.1) workload for the many-partitions bench capture
// (tools/make_capture.py --workload bench-java-partitions, tools/bench_workloads.py): one consumer
// (a group of one member, so it fetches every partition) tails TOPICS topics of PARTITIONS
// partitions each while one producer sends RECORDS records of VALUE bytes spread over every
// partition, in bursts of BURST records paced PAUSE_MS apart. Fetch v12+ names topics by id, and the
// consumer's fetches are bounded to FETCH_BYTES per partition, so its many Fetch requests each name
// every partition, most of them empty. Prints "produced N" and "consumed N" when done: the consumer
// stops when it has every record, or IDLE_S seconds after the producer finished with no record
// since (tansu has been seen to leave some partitions' last records unfetched with 1,280
// partitions), or after TIMEOUT_S seconds.
//
//     java -cp kafka-clients.jar:slf4j-api.jar PartitionsWorkload.java \
//         BOOTSTRAP TOPIC_PREFIX TOPICS PARTITIONS RECORDS VALUE BURST PAUSE_MS FETCH_BYTES IDLE_S TIMEOUT_S
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class PartitionsWorkload {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        int topics = Integer.parseInt(args[2]), partitions = Integer.parseInt(args[3]);
        int records = Integer.parseInt(args[4]), valueSize = Integer.parseInt(args[5]);
        int burst = Integer.parseInt(args[6]), pauseMs = Integer.parseInt(args[7]);
        int fetchBytes = Integer.parseInt(args[8]), idleS = Integer.parseInt(args[9]);
        int timeoutS = Integer.parseInt(args[10]);
        List<String> names = new ArrayList<>();
        for (int t = 0; t < topics; t++) names.add(prefix + t);

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("client.id", "bench-java-consumer");
        c.put("group.id", "bench-java-partitions");
        c.put("auto.offset.reset", "earliest");
        c.put("fetch.max.wait.ms", "100");
        c.put("max.partition.fetch.bytes", Integer.toString(fetchBytes));
        c.put("fetch.max.bytes", Integer.toString(fetchBytes * 32));
        c.put("max.poll.records", "5000");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        AtomicLong consumed = new AtomicLong();
        AtomicLong assigned = new AtomicLong();
        AtomicLong producedAt = new AtomicLong(Long.MAX_VALUE); // when the producer finished
        long deadline = System.currentTimeMillis() + timeoutS * 1000L;
        Thread consumer = new Thread(() -> {
            try (KafkaConsumer<byte[], byte[]> k = new KafkaConsumer<>(c)) {
                k.subscribe(names);
                long lastRecordAt = System.currentTimeMillis();
                while (System.currentTimeMillis() < deadline && consumed.get() < records) {
                    int got = k.poll(Duration.ofMillis(200)).count();
                    long now = System.currentTimeMillis();
                    if (got > 0) lastRecordAt = now;
                    consumed.addAndGet(got);
                    assigned.set(k.assignment().size());
                    if (now - Math.max(lastRecordAt, producedAt.get()) > idleS * 1000L
                            && producedAt.get() != Long.MAX_VALUE) break;
                }
            }
        });
        consumer.start();
        // The producer starts once the member holds every partition: its records are tailed.
        while (assigned.get() < (long) topics * partitions && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "bench-java-producer");
        p.put("linger.ms", "20");
        p.put("acks", "1");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        // Values that compress to about half, as tools/bench_workloads.py makes them.
        Random random = new Random(37);
        byte[][] values = new byte[64][];
        byte[] text = "{\"kind\":\"order\",\"note\":\"kwsniff bench record\"}".getBytes();
        for (int v = 0; v < values.length; v++) {
            values[v] = new byte[valueSize];
            byte[] head = new byte[valueSize / 2];
            random.nextBytes(head);
            System.arraycopy(head, 0, values[v], 0, head.length);
            for (int i = head.length; i < valueSize; i++) values[v][i] = text[i % text.length];
        }
        int all = topics * partitions;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < records; i++) {
                int slot = i % all;
                producer.send(new ProducerRecord<>(
                        names.get(slot % topics), slot / topics, ("k" + i).getBytes(), values[i % values.length]));
                if (i % burst == burst - 1) Thread.sleep(pauseMs);
            }
        }
        producedAt.set(System.currentTimeMillis());
        System.out.println("produced " + records);
        consumer.join();
        System.out.println("consumed " + consumed.get());
    }
}
