package io.kafkaaudit.interceptor;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * The Java clients of the end-to-end test (kafka-audit/tests/it/java_interceptors.rs):
 * a plain KafkaProducer and a plain KafkaConsumer with only the interceptor's
 * properties added, and records deleted at the broker with AdminClient.deleteRecords.
 * Prints what the application itself saw (its own callbacks and polls) for the test
 * to compare with what the audit says, and the interceptor's JMX counters.
 *
 * <pre>
 * produce BOOTSTRAP TOPIC COUNT RATE DATACENTER AUDIT_TOPIC EVENT_TIME_TOML REPORT_MS
 *   prints "acked PARTITION OFFSET TS ID" per acknowledged record, then "metrics ..."
 *   (a tenth argument "brief": no "metrics" line, the client closed right after flush)
 * consume BOOTSTRAP TOPIC GROUP EXPECTED DATACENTER AUDIT_TOPIC EVENT_TIME_TOML REPORT_MS
 *   prints "consumed N", then "metrics ..."
 * delete-records BOOTSTRAP TOPIC PARTITION BEFORE_OFFSET
 * </pre>
 */
public final class E2eClient {
  private E2eClient() {}

  static Properties audited(String bootstrap, String datacenter, String auditTopic, String eventTime, String reportMs) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("kafka_audit.datacenter", datacenter);
    p.put("kafka_audit.audit_topic", auditTopic);
    p.put("kafka_audit.event_time.config", eventTime);
    p.put("kafka_audit.report.interval.ms", reportMs);
    return p;
  }

  public static void main(String[] a) throws Exception {
    switch (a[0]) {
      case "produce":
        produce(a[1], a[2], Long.parseLong(a[3]), Long.parseLong(a[4]), audited(a[1], a[5], a[6], a[7], a[8]), a.length < 10 || !a[9].equals("brief"));
        break;
      case "consume":
        consume(a[2], a[3], Long.parseLong(a[4]), audited(a[1], a[5], a[6], a[7], a[8]));
        break;
      case "delete-records":
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", a[1]))) {
          admin
              .deleteRecords(Map.of(new TopicPartition(a[2], Integer.parseInt(a[3])), RecordsToDelete.beforeOffset(Long.parseLong(a[4]))))
              .all()
              .get();
        }
        System.out.println("deleted");
        break;
      default:
        throw new IllegalArgumentException("unknown mode " + a[0]);
    }
  }

  static void produce(String bootstrap, String topic, long count, long rate, Properties p, boolean counters) throws Exception {
    p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("interceptor.classes", AuditProducerInterceptor.class.getName());
    p.put("client.id", "e2e-producer");
    AtomicLong failed = new AtomicLong();
    StringBuffer out = new StringBuffer();
    String metrics;
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
      long start = System.nanoTime();
      for (long i = 0; i < count; i++) {
        long due = start + i * 1_000_000_000L / rate;
        long wait = due - System.nanoTime();
        if (wait > 0) {
          Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
        }
        long ts = System.currentTimeMillis();
        long id = i;
        producer.send(
            new ProducerRecord<>(topic, "k" + i, "{\"id\":" + i + ",\"ts\":" + ts + "}"),
            (md, e) -> {
              if (e == null) {
                out.append("acked ").append(md.partition()).append(' ').append(md.offset()).append(' ').append(ts).append(' ').append(id).append('\n');
              } else {
                failed.incrementAndGet();
                out.append("failed ").append(id).append(' ').append(e).append('\n');
              }
            });
      }
      producer.flush();
      // "brief": closed at once, before any report (the last counts go out at close).
      metrics = counters ? metrics("producer", "e2e-producer", count - failed.get()) : "";
    }
    System.out.print(out);
    System.out.println(metrics);
    System.out.println("done failed=" + failed.get());
  }

  static void consume(String topic, String group, long expected, Properties p) throws Exception {
    p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("interceptor.classes", AuditConsumerInterceptor.class.getName());
    p.put("group.id", group);
    p.put("auto.offset.reset", "earliest");
    p.put("client.id", "e2e-consumer");
    long seen = 0;
    String metrics;
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
      consumer.subscribe(List.of(topic));
      long deadline = System.currentTimeMillis() + 120_000;
      while (seen < expected && System.currentTimeMillis() < deadline) {
        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
        for (ConsumerRecord<String, String> r : records) {
          seen++;
        }
        if (!records.isEmpty()) {
          consumer.commitSync();
        }
      }
      metrics = metrics("consumer", "e2e-consumer", seen);
    }
    System.out.println("consumed " + seen);
    System.out.println(metrics);
  }

  /**
   * The interceptor's JMX counters, as "metrics Name=value ...", once it has counted
   * {@code expected} records (it counts on its own thread; bounded wait, 30 s).
   */
  static String metrics(String role, String clientId, long expected) throws Exception {
    MBeanServer s = ManagementFactory.getPlatformMBeanServer();
    ObjectName n = new ObjectName("io.kafkaaudit:type=" + role + "-interceptor,client-id=" + ObjectName.quote(clientId));
    long deadline = System.currentTimeMillis() + 30_000;
    while ((Long) s.getAttribute(n, "Counted") < expected && System.currentTimeMillis() < deadline) {
      Thread.sleep(20);
    }
    StringBuilder b = new StringBuilder("metrics");
    for (javax.management.MBeanAttributeInfo attr : s.getMBeanInfo(n).getAttributes()) {
      b.append(' ').append(attr.getName()).append('=').append(s.getAttribute(n, attr.getName()));
    }
    return b.toString();
  }
}
