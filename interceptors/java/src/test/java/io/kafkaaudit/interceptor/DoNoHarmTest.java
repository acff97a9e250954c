package io.kafkaaudit.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * First, do no harm, for the Java interceptors: no exception and no blocking call reaches
 * the application from onSend, onAcknowledgement, onConsume, onCommit or close, whatever
 * becomes of the audit cluster (here unreachable for the whole run: a closed loopback
 * port), the reporter's thread (held up: the backlog's cap) or the audit producer's
 * configuration (refused by Kafka when it is created). No broker is needed.
 */
class DoNoHarmTest {
  static final long T0 = InterceptorTest.T0;

  @TempDir Path dir;

  /** A loopback port nothing listens on. */
  static int closedPort() throws Exception {
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  Map<String, Object> config(boolean producer, long reportIntervalMs) throws Exception {
    Map<String, Object> c = new HashMap<>();
    c.put("bootstrap.servers", "127.0.0.1:" + closedPort());
    c.put("client.id", "harm-" + System.nanoTime());
    c.put("kafka_audit.datacenter", "dc1");
    c.put("kafka_audit.report.interval.ms", String.valueOf(reportIntervalMs));
    Path et = dir.resolve("event-time.toml");
    Files.writeString(et, "window_size = \"1m\"\n[default]\nheader = \"event-time\"\n");
    c.put("kafka_audit.event_time.config", et.toString());
    String ser = producer ? "Serializer" : "Deserializer";
    c.put("key." + ser.toLowerCase(), "org.apache.kafka.common.serialization.String" + ser);
    c.put("value." + ser.toLowerCase(), "org.apache.kafka.common.serialization.String" + ser);
    return c;
  }

  static ConsumerRecords<String, String> records(TopicPartition tp, long from, int n, String value) {
    List<ConsumerRecord<String, String>> rs = new ArrayList<>();
    for (long o = from; o < from + n; o++) {
      String v = value != null ? value : "{\"ts\":" + (T0 + o) + "}";
      rs.add(new ConsumerRecord<>(tp.topic(), tp.partition(), o, T0 + o, TimestampType.CREATE_TIME, 1, v.length(), "k", v, new RecordHeaders(), Optional.empty()));
    }
    return new ConsumerRecords<>(Map.of(tp, rs), Map.of());
  }

  /**
   * Kafka's InterceptorList.onSendError passes a null RecordMetadata when the record is
   * null (send(null)) or has no partition yet. Before: the slot was taken before the NPE,
   * so 4 096 of them filled the chunk without handing it over, and every acknowledgement
   * after that threw (ArrayIndexOutOfBounds) until the next report: lost.
   */
  @Test
  void an_acknowledgement_without_metadata_harms_no_other() throws Exception {
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(config(true, 3_600_000));
    try {
      ProducerRecord<String, String> failed = p.onSend(new ProducerRecord<>("orders", null, T0, "k", "{}"));
      p.onAcknowledgement(null, new KafkaException("no partition"), failed.headers());
      for (int k = 0; k < 4096; k++) {
        p.onAcknowledgement(null, new KafkaException("send(null)"), new RecordHeaders());
      }
      String v = "{\"ts\":" + T0 + "}";
      ProducerRecord<String, String> r = p.onSend(new ProducerRecord<>("orders", null, T0, "k", v));
      p.onAcknowledgement(new RecordMetadata(new TopicPartition("orders", 0), 7, 0, T0, 1, v.length()), null, r.headers());
      p.drainForTest(InterceptorTest.ID, T0);
      AuditMetrics m = p.metrics();
      assertEquals(1, m.getCounted(), "the good acknowledgement");
      assertEquals(1, m.getDeliveryFailed(), "the failed one of this interceptor's record");
      assertEquals(4096, m.getUncorrelated(), "the ones without its headers");
      assertEquals(0, m.getInternalErrors());
    } finally {
      p.close();
    }
  }

  /** Odd arguments: null batches, commits, records, metadata and headers; close twice. */
  @Test
  void odd_arguments_never_throw() throws Exception {
    AuditConsumerInterceptor<String, String> c = new AuditConsumerInterceptor<>();
    c.configure(config(false, 3_600_000));
    c.emitter().closeTimeoutMs = 1_000;
    assertNull(c.onConsume(null));
    c.onCommit(null);
    Map<TopicPartition, OffsetAndMetadata> withNull = new HashMap<>();
    withNull.put(new TopicPartition("orders", 0), null);
    c.onCommit(withNull);
    c.close();
    c.close();
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(config(true, 3_600_000));
    p.emitter().closeTimeoutMs = 1_000;
    assertNull(p.onSend(null));
    p.onAcknowledgement(null, null, null);
    p.onAcknowledgement(null, null);
    p.close();
    p.close();
  }

  /**
   * The application's thread interrupted when it closes its client. Before: the audit
   * producer's close threw Kafka's InterruptException out of the interceptor's close,
   * which then left its MBean registered (the next client of that client.id has none).
   */
  @Test
  void an_interrupted_close_throws_nothing_and_keeps_the_interrupt() throws Exception {
    Map<String, Object> c = config(true, 3_600_000);
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(c);
    p.emitter().closeTimeoutMs = 1_000;
    InterceptorTest.await(() -> p.emitter().hasProducer(), 5_000, () -> "no audit producer");
    javax.management.ObjectName name =
        new javax.management.ObjectName(
            "io.kafkaaudit:type=producer-interceptor,client-id=" + javax.management.ObjectName.quote((String) c.get("client.id")));
    assertTrue(java.lang.management.ManagementFactory.getPlatformMBeanServer().isRegistered(name));
    Thread.currentThread().interrupt();
    try {
      p.close();
    } finally {
      assertTrue(Thread.interrupted(), "the application's interrupt is kept");
    }
    assertTrue(!java.lang.management.ManagementFactory.getPlatformMBeanServer().isRegistered(name), "MBean left registered");
  }

  /**
   * The reporter's thread held up (as by a CPU-starved JVM): what the application's
   * threads hand it is capped ({@link AuditEmitter#MAX_BACKLOG_RECORDS} records,
   * {@link AuditEmitter#MAX_BACKLOG_BYTES} of consumed records, {@link
   * AuditEmitter#MAX_QUEUED_TASKS} commits); beyond, it is dropped and counted, never
   * queued without bound. Before: every chunk and batch was queued (an OutOfMemoryError
   * in the application, given time).
   */
  @Test
  void a_held_up_reporter_caps_the_backlog_and_counts_what_it_drops() throws Exception {
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(config(true, 3_600_000));
    CountDownLatch release = new CountDownLatch(1);
    try {
      AuditMetrics m = p.metrics();
      p.emitter().submit(() -> await(release));
      TopicPartition tp = new TopicPartition("orders", 0);
      String v = "{\"ts\":" + T0 + "}";
      int total = 200_000;
      for (int k = 0; k < total; k++) {
        ProducerRecord<String, String> r = p.onSend(new ProducerRecord<>("orders", null, T0, "k", v));
        p.onAcknowledgement(new RecordMetadata(tp, k, 0, T0, 1, v.length()), null, r.headers());
        assertTrue(m.getBacklog() <= AuditEmitter.MAX_BACKLOG_RECORDS, "backlog " + m.getBacklog());
      }
      assertTrue(m.getBacklogOverflow() >= total - AuditEmitter.MAX_BACKLOG_RECORDS - 4096, "overflow " + m.getBacklogOverflow());
      release.countDown();
      p.drainForTest(InterceptorTest.ID, T0);
      assertEquals(total, m.getCounted() + m.getBacklogOverflow(), "each acknowledgement counted or counted as dropped");
      assertEquals(0, m.getBacklog());
    } finally {
      release.countDown();
      p.emitter().closeTimeoutMs = 1_000;
      p.close();
    }

    AuditConsumerInterceptor<String, String> c = new AuditConsumerInterceptor<>();
    c.configure(config(false, 3_600_000));
    CountDownLatch release2 = new CountDownLatch(1);
    try {
      AuditMetrics m = c.metrics();
      c.emitter().submit(() -> await(release2));
      TopicPartition tp = new TopicPartition("orders", 0);
      ConsumerRecords<String, String> batch = records(tp, 0, 500, null);
      for (int k = 0; k < 400; k++) {
        c.onConsume(batch);
        assertTrue(m.getBacklog() <= AuditEmitter.MAX_BACKLOG_RECORDS, "backlog " + m.getBacklog());
      }
      assertEquals(400 * 500 - AuditEmitter.MAX_BACKLOG_RECORDS, m.getBacklogOverflow());
      for (int k = 0; k < AuditEmitter.MAX_QUEUED_TASKS + 5_000; k++) {
        c.onCommit(Map.of(tp, new OffsetAndMetadata(k)));
      }
      assertTrue(m.getCommitsDropped() >= 5_000, "commits dropped " + m.getCommitsDropped());
      release2.countDown();
      c.drainForTest(InterceptorTest.ID, T0);
      assertEquals(0, m.getBacklog());
    } finally {
      release2.countDown();
      c.emitter().closeTimeoutMs = 1_000;
      c.close();
    }

    // Consumed bytes: ten records of 1 MiB a batch (one shared string, the sizes as read).
    AuditConsumerInterceptor<String, String> big = new AuditConsumerInterceptor<>();
    big.configure(config(false, 3_600_000));
    CountDownLatch release3 = new CountDownLatch(1);
    try {
      AuditMetrics m = big.metrics();
      big.emitter().submit(() -> await(release3));
      char[] mib = new char[1 << 20];
      Arrays.fill(mib, 'x');
      ConsumerRecords<String, String> batch = records(new TopicPartition("blobs", 0), 0, 10, new String(mib));
      for (int k = 0; k < 20; k++) {
        big.onConsume(batch);
      }
      long perBatch = 10L * ((1 << 20) + 1);
      long kept = AuditEmitter.MAX_BACKLOG_BYTES / perBatch;
      assertEquals((20 - kept) * 10, m.getBacklogOverflow(), "batches beyond the byte cap");
    } finally {
      release3.countDown();
      big.emitter().closeTimeoutMs = 1_000;
      big.close();
    }
  }

  static void await(CountDownLatch l) {
    try {
      l.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** The max and the 99.9th percentile of call times, in ns. */
  static long[] maxAndP999(long[] ns) {
    long[] s = ns.clone();
    Arrays.sort(s);
    return new long[] {s[s.length - 1], s[(int) (s.length * 0.999)]};
  }

  /** A call's bound: generous against a shared CI machine's scheduling and GC, far below any network wait (seconds). */
  static final long MAX_CALL_NS = 500_000_000L;
  static final long P999_CALL_NS = 1_000_000L;
  static final int CALLS = 100_000;

  /**
   * The audit cluster unreachable for the whole run (127.0.0.1, a closed port), reports
   * every 100 ms: 100 000 calls of each kind, each timed. Bounds: none throws; the
   * 99.9th percentile under 1 ms and the maximum under 500 ms (GC pauses and a
   * shared 2-core machine's scheduling) (against seconds for any
   * wait on the network: metadata, a send's buffer, a Future); the backlog within its cap
   * throughout; close() within its documented bound (producer: the default 15 s;
   * consumer: set to 2 s) plus 2 s.
   */
  @Test
  void with_the_audit_cluster_unreachable_no_call_throws_or_waits() throws Exception {
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(config(true, 100));
    AuditMetrics pm = p.metrics();
    TopicPartition tp = new TopicPartition("orders", 0);
    long[] send = new long[CALLS];
    long[] ack = new long[CALLS];
    for (int round = 0; round < 2; round++) { // the first warms up
      for (int k = 0; k < CALLS; k++) {
        String v = "{\"ts\":" + (T0 + k) + "}";
        long t0 = System.nanoTime();
        ProducerRecord<String, String> r = p.onSend(new ProducerRecord<>("orders", null, T0, "k", v));
        long t1 = System.nanoTime();
        p.onAcknowledgement(new RecordMetadata(tp, k, 0, T0, 1, v.length()), null, r.headers());
        long t2 = System.nanoTime();
        send[k] = t1 - t0;
        ack[k] = t2 - t1;
        if (k % 1000 == 0) {
          assertTrue(pm.getBacklog() <= AuditEmitter.MAX_BACKLOG_RECORDS, "backlog " + pm.getBacklog());
        }
      }
    }
    InterceptorTest.await(() -> pm.getAuditSendFailures() >= 1, 5_000, () -> "no report tried");
    long t0 = System.nanoTime();
    p.close();
    long closeMs = (System.nanoTime() - t0) / 1_000_000;

    AuditConsumerInterceptor<String, String> c = new AuditConsumerInterceptor<>();
    c.configure(config(false, 100));
    AuditMetrics cm = c.metrics();
    long[] consume = new long[CALLS];
    long[] commit = new long[CALLS];
    for (int round = 0; round < 2; round++) {
      for (int k = 0; k < CALLS; k++) {
        ConsumerRecords<String, String> one = records(tp, k, 1, null);
        Map<TopicPartition, OffsetAndMetadata> offsets = Map.of(tp, new OffsetAndMetadata(k + 1));
        long a = System.nanoTime();
        c.onConsume(one);
        long b = System.nanoTime();
        c.onCommit(offsets);
        long e = System.nanoTime();
        consume[k] = b - a;
        commit[k] = e - b;
        if (k % 1000 == 0) {
          assertTrue(cm.getBacklog() <= AuditEmitter.MAX_BACKLOG_RECORDS, "backlog " + cm.getBacklog());
        }
      }
    }
    InterceptorTest.await(() -> cm.getAuditSendFailures() >= 1, 5_000, () -> "no report tried");
    c.emitter().closeTimeoutMs = 2_000;
    long c0 = System.nanoTime();
    c.close();
    long consumerCloseMs = (System.nanoTime() - c0) / 1_000_000;

    Map<String, long[]> calls = new java.util.LinkedHashMap<>();
    calls.put("onSend", maxAndP999(send));
    calls.put("onAcknowledgement", maxAndP999(ack));
    calls.put("onConsume", maxAndP999(consume));
    calls.put("onCommit", maxAndP999(commit));
    StringBuilder report = new StringBuilder("audit cluster unreachable, " + CALLS + " timed calls each:");
    calls.forEach((name, v) -> report.append(String.format(" %s max %.3f ms p99.9 %.3f ms;", name, v[0] / 1e6, v[1] / 1e6)));
    report.append(" producer close ").append(closeMs).append(" ms, consumer close ").append(consumerCloseMs).append(" ms");
    System.out.println(report);
    for (Map.Entry<String, long[]> e : calls.entrySet()) {
      assertTrue(e.getValue()[0] < MAX_CALL_NS && e.getValue()[1] < P999_CALL_NS, e.getKey() + ": " + report);
    }
    assertTrue(closeMs <= AuditEmitter.CLOSE_TIMEOUT_MS + 2_000, report.toString());
    assertTrue(consumerCloseMs <= 2_000 + 2_000, report.toString());
    assertTrue(pm.getAuditMessagesLost() >= 1 && cm.getAuditMessagesLost() >= 1, "the undelivered counts are counted as lost");
  }

  /**
   * An audit producer that Kafka refuses when it is created (here a trust store that
   * does not exist): the client is created and works, its interceptor counts, tries again
   * at each report and counts each refusal, and close() returns at once, the counts
   * counted as lost. Before: the application's own client failed to be created.
   */
  @Test
  void an_audit_producer_kafka_refuses_never_fails_the_client() throws Exception {
    Map<String, Object> c = config(true, 100);
    c.put("kafka_audit.security.protocol", "SSL");
    c.put("kafka_audit.ssl.truststore.location", dir.resolve("missing.jks").toString());
    c.put("kafka_audit.ssl.truststore.password", "changeit");
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(c);
    try {
      AuditMetrics m = p.metrics();
      String v = "{\"ts\":" + T0 + "}";
      ProducerRecord<String, String> r = p.onSend(new ProducerRecord<>("orders", null, T0, "k", v));
      p.onAcknowledgement(new RecordMetadata(new TopicPartition("orders", 0), 1, 0, T0, 1, v.length()), null, r.headers());
      InterceptorTest.await(() -> m.getAuditProducerFailures() >= 2 && m.getCounted() == 1, 5_000, () -> "refusals " + m.getAuditProducerFailures());
      long t0 = System.nanoTime();
      p.close();
      long ms = (System.nanoTime() - t0) / 1_000_000;
      assertTrue(ms < 2_000, "close took " + ms + " ms");
      assertEquals(1, m.getAuditMessagesLost());
    } finally {
      p.close();
    }
    // The application's own producer, created as an application creates it.
    Properties props = new Properties();
    props.putAll(c);
    props.put("interceptor.classes", AuditProducerInterceptor.class.getName());
    props.put("max.block.ms", "0");
    KafkaProducer<String, String> app = new KafkaProducer<>(props);
    app.close(Duration.ofSeconds(20));
  }
}
