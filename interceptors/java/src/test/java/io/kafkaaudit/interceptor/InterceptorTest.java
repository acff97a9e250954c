package io.kafkaaudit.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
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
 * The interceptors driven as Kafka drives them (onSend, then onAcknowledgement with the
 * headers of the record onSend returned; onConsume, then onCommit), without a broker:
 * the audit producer they create is never asked to send here, and the counts are read
 * from the interceptor before any report. The end-to-end test with real brokers is
 * kafka-audit/tests/it/java_interceptors.rs.
 */
class InterceptorTest {
  /** A minute boundary a few minutes ago: within the default skew bounds of now. */
  static final long T0 = (System.currentTimeMillis() / 60_000 - 5) * 60_000;
  static final AuditJson.Identity ID = new AuditJson.Identity("t", "d", "h");

  @TempDir Path dir;

  Map<String, Object> config(boolean producer) throws Exception {
    Map<String, Object> c = new HashMap<>();
    c.put("bootstrap.servers", "127.0.0.1:9");
    c.put("client.id", "test-" + System.nanoTime());
    c.put("kafka_audit.datacenter", "dc1");
    c.put("kafka_audit.report.interval.ms", "3600000");
    Path et = dir.resolve("event-time.toml");
    Files.writeString(et, "window_size = \"1m\"\n[default]\nheader = \"event-time\"\n");
    c.put("kafka_audit.event_time.config", et.toString());
    String ser = producer ? "serializer" : "deserializer";
    c.put("key." + ser, "org.apache.kafka.common.serialization.String" + (producer ? "Serializer" : "Deserializer"));
    c.put("value." + ser, "org.apache.kafka.common.serialization.String" + (producer ? "Serializer" : "Deserializer"));
    return c;
  }

  static Throwable root(Throwable t) {
    while (t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  @Test
  void a_config_error_fails_client_creation_with_a_message_that_names_it() throws Exception {
    Path bad = dir.resolve("bad.toml");
    Files.writeString(bad, "[[rules]]\ntopic = \"a\"\nfeild = \"x\"\n");
    Map<String, String> cases = new HashMap<>();
    cases.put("kafka_audit.datacenter", "kafka_audit.datacenter is required");
    cases.put("kafka_audit.event_time.config=" + bad, bad + ": event-time rule 0: unknown field `feild`");
    cases.put("kafka_audit.event_time.config=/nonexistent/et.toml", "cannot read /nonexistent/et.toml");
    cases.put("kafka_audit.report.interval.ms=10", "kafka_audit.report.interval.ms");
    cases.put("kafka_audit.audit_topic=a/b", "not a Kafka topic name");
    cases.put("kafka_audit.bootstrap.server=x:1", "unknown property kafka_audit.bootstrap.server");
    cases.put("kafka_audit.spool.dir=/tmp", "kafka_audit.spool.dir is not supported");
    cases.put("kafka_audit.max.block.ms=5000", "kafka_audit.max.block.ms is not supported");
    cases.put("kafka_audit.tier=a b", "kafka_audit.tier");
    cases.put("kafka_audit.tier=Replicator:group/mirror", "are reserved: replication evidence comes only from the replicator's auditors");
    // A value Kafka's own definition of the property refuses: named as it was set.
    cases.put("kafka_audit.linger.ms=abc", "kafka_audit.linger.ms");
    for (Map.Entry<String, String> c : cases.entrySet()) {
      Properties p = new Properties();
      p.putAll(config(true));
      p.put("interceptor.classes", AuditProducerInterceptor.class.getName());
      String[] kv = c.getKey().split("=", 2);
      if (kv.length == 1) {
        p.remove(kv[0]);
      } else {
        p.put(kv[0], kv[1]);
      }
      KafkaException e = assertThrows(KafkaException.class, () -> new KafkaProducer<String, String>(p).close(), c.getKey());
      String why = root(e).getMessage();
      assertTrue(why.contains(c.getValue()), c.getKey() + ": " + why);
    }
    Properties p = new Properties();
    p.putAll(config(false));
    p.remove("kafka_audit.datacenter");
    p.put("interceptor.classes", AuditConsumerInterceptor.class.getName());
    KafkaException e = assertThrows(KafkaException.class, () -> new KafkaConsumer<String, String>(p).close());
    assertTrue(root(e).getMessage().contains("kafka_audit.datacenter is required"), root(e).getMessage());
  }

  /**
   * A replicator's evidence (tiers starting with {@code replicator:}) is the auditors'
   * alone (docs/design.md §10), so configure() refuses such a tier, in any case, for
   * either interceptor; a tier that merely starts with "replicator" is an ordinary one.
   */
  @Test
  void a_reserved_evidence_tier_fails_configure() throws Exception {
    for (String reserved : List.of("replicator:group/mirror", "Replicator:mm2/agg", "REPLICATOR:")) {
      for (boolean producer : List.of(true, false)) {
        Map<String, Object> c = config(producer);
        c.put("kafka_audit.tier", reserved);
        org.apache.kafka.common.config.ConfigException e =
            assertThrows(
                org.apache.kafka.common.config.ConfigException.class,
                () -> {
                  if (producer) {
                    new AuditProducerInterceptor<String, String>().configure(c);
                  } else {
                    new AuditConsumerInterceptor<String, String>().configure(c);
                  }
                },
                reserved);
        String why = e.getMessage();
        assertTrue(why.contains("kafka_audit.tier"), why);
        assertTrue(why.contains("reserved"), why);
        assertTrue(why.contains("\"replicator:\""), why);
        assertTrue(why.contains("only from the replicator's auditors"), why);
      }
    }
    Map<String, Object> c = config(true);
    c.put("kafka_audit.tier", "replicator-edge");
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(c);
    p.close();
  }

  /** What audit-lib's algorithm gives for the same records seen whole (one classify per record). */
  static List<String> expected(List<Object[]> records, long observedAt) throws Exception {
    EventTimeConfig cfg = EventTimeConfig.fromToml("window_size = \"1m\"\n[default]\nheader = \"event-time\"\n");
    Aggregator agg = new Aggregator(cfg, true, 100);
    for (Object[] r : records) {
      byte[] key = ((String) r[0]).getBytes(StandardCharsets.UTF_8);
      byte[] value = r[1] == null ? null : ((String) r[1]).getBytes(StandardCharsets.UTF_8);
      byte[] header = r[3] == null ? null : ((String) r[3]).getBytes(StandardCharsets.UTF_8);
      Classifier.RecordTimestamp ts = new Classifier.RecordTimestamp((Long) r[2], false);
      Classifier.Classification c = Classifier.classify(agg.ruleFor("orders"), value, n -> header, ts, observedAt);
      agg.record("orders", c, MessageHash.of(key, value), key.length + (value == null ? 0 : value.length), observedAt, ts, 0, (Long) r[4]);
    }
    List<String> out = new ArrayList<>();
    for (Aggregator.Increment inc : agg.drain()) {
      out.add(AuditJson.increment(ID, new java.util.UUID(0, out.size()), observedAt, inc));
    }
    return out;
  }

  /** Without the latency and the latest observation time, which are of each acknowledgement's clock. */
  static String withoutLatency(String json) {
    return json.replaceAll("\"latency\":\\{[^}]*\\}", "").replaceAll(",\"max_observed_at\":[0-9]+", "");
  }

  @Test
  void acknowledged_records_are_counted_from_the_bytes_that_were_sent() throws Exception {
    AuditProducerInterceptor<String, String> i = new AuditProducerInterceptor<>();
    i.configure(config(true));
    try {
      List<Object[]> records = new ArrayList<>();
      records.add(new Object[] {"k1", "{\"ts\":" + (T0 + 1000) + "}", T0 + 2000, null, 10L});
      records.add(new Object[] {"k2", "{\"x\":1}", T0 + 61_000, String.valueOf(T0 + 3000), 11L});
      records.add(new Object[] {"k3", "not json", T0 + 62_000, null, 12L});
      records.add(new Object[] {"k4", null, T0 + 63_000, null, 13L});
      records.add(new Object[] {"k5", "{\"ts\":\"2025-11-29T11:00:00.5+01:00\"}", T0, null, 14L}); // out of bounds
      TopicPartition tp = new TopicPartition("orders", 0);
      // Sent in order, acknowledged in another (as from several partitions' batches).
      List<ProducerRecord<String, String>> sent = new ArrayList<>();
      for (Object[] r : records) {
        RecordHeaders h = new RecordHeaders();
        if (r[3] != null) {
          h.add("event-time", ((String) r[3]).getBytes(StandardCharsets.UTF_8));
        }
        ProducerRecord<String, String> in = new ProducerRecord<>("orders", null, (Long) r[2], (String) r[0], (String) r[1], h);
        ProducerRecord<String, String> out = i.onSend(in);
        assertEquals(in.value(), out.value());
        assertEquals(in.key(), out.key());
        assertEquals(in.timestamp(), out.timestamp());
        assertEquals(in.headers().lastHeader("event-time") == null, out.headers().lastHeader("event-time") == null);
        sent.add(out);
      }
      for (int k = sent.size() - 1; k >= 0; k--) {
        ProducerRecord<String, String> r = sent.get(k);
        int vs = r.value() == null ? -1 : r.value().getBytes(StandardCharsets.UTF_8).length;
        RecordMetadata md = new RecordMetadata(tp, (Long) records.get(k)[4], 0, r.timestamp(), r.key().length(), vs);
        i.onAcknowledgement(md, null, r.headers());
      }
      long now = System.currentTimeMillis();
      List<String> got = i.drainForTest(ID, now);
      List<String> want = expected(records, now);
      // Latency and the latest observation time are of each acknowledgement's clock (a
      // few ms apart): compared apart.
      assertEquals(want.size(), got.size(), got.toString());
      for (int k = 0; k < want.size(); k++) {
        assertEquals(withoutLatency(want.get(k)), withoutLatency(got.get(k)));
        java.util.regex.Matcher at = java.util.regex.Pattern.compile("\"max_observed_at\":([0-9]+)").matcher(got.get(k));
        assertTrue(at.find() && Long.parseLong(at.group(1)) <= now, got.get(k));
      }
      assertEquals(records.size(), i.metrics().getCounted());
    } finally {
      i.close();
    }
  }

  @Test
  void failures_unseen_bytes_and_foreign_headers_are_counted_apart() throws Exception {
    Map<String, Object> c = config(true);
    AuditProducerInterceptor<String, String> i = new AuditProducerInterceptor<>();
    i.configure(c);
    try {
      TopicPartition tp = new TopicPartition("orders", 0);
      ProducerRecord<String, String> r = i.onSend(new ProducerRecord<>("orders", null, T0, "k", "{\"ts\":" + (T0 + 5) + "}"));
      // A failed delivery: in delivery_failed_count of its window, not in count.
      i.onAcknowledgement(new RecordMetadata(tp, -1, -1, -1, -1, -1), new KafkaException("boom"), r.headers());
      // Sizes the interceptor did not derive (another serializer did something else).
      i.onAcknowledgement(new RecordMetadata(tp, 5, 0, T0, 1, 999), null, r.headers());
      // Headers that are not the ones onSend handed on: no way to know the payload.
      i.onAcknowledgement(new RecordMetadata(tp, 6, 0, T0, 1, 13), null, new RecordHeaders());
      List<String> got = i.drainForTest(ID, T0);
      assertEquals(1, got.size(), got.toString());
      assertTrue(got.get(0).contains("\"count\":0,") && got.get(0).contains("\"delivery_failed_count\":1,"), got.get(0));
      assertTrue(got.get(0).contains("\"window_start\":" + T0 + ","), got.get(0));
      assertEquals(1, i.metrics().getDeliveryFailed());
      assertEquals(1, i.metrics().getUnseenBytes());
      assertEquals(1, i.metrics().getUncorrelated());
      assertEquals(0, i.metrics().getCounted());
    } finally {
      i.close();
    }
    // A value type whose bytes only its serializer knows: not counted, never guessed.
    Map<String, Object> longs = config(true);
    longs.put("value.serializer", "org.apache.kafka.common.serialization.LongSerializer");
    AuditProducerInterceptor<String, Long> j = new AuditProducerInterceptor<>();
    j.configure(longs);
    try {
      ProducerRecord<String, Long> r = j.onSend(new ProducerRecord<>("orders", null, T0, "k", 7L));
      j.onAcknowledgement(new RecordMetadata(new TopicPartition("orders", 0), 1, 0, T0, 1, 8), null, r.headers());
      assertEquals(List.of(), j.drainForTest(ID, T0));
      assertEquals(1, j.metrics().getUnseenBytes());
    } finally {
      j.close();
    }
  }

  /** Polls {@code done} every 10 ms until it holds; fails after {@code ms}. */
  static void await(java.util.function.BooleanSupplier done, long ms, java.util.function.Supplier<String> what) throws InterruptedException {
    long deadline = System.nanoTime() + ms * 1_000_000;
    while (!done.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, () -> "not within " + ms + " ms: " + what.get());
      Thread.sleep(10);
    }
  }

  /**
   * The audit cluster unreachable (nothing listens on the config's 127.0.0.1:9): a
   * report cannot be sent, and must neither hold up the counting behind it (records
   * handed to the reporter's thread would pile up in the application's heap, a record
   * at a time, for as long as a send waits for metadata) nor wait itself: it fails at
   * once and is sent again with the next one.
   */
  @Test
  void an_unreachable_audit_cluster_holds_up_neither_the_counting_nor_the_reports() throws Exception {
    Map<String, Object> c = config(true);
    c.put("kafka_audit.report.interval.ms", "100");
    AuditProducerInterceptor<String, String> p = new AuditProducerInterceptor<>();
    p.configure(c);
    TopicPartition tp = new TopicPartition("orders", 0);
    long[] offset = {0};
    Runnable sendOne =
        () -> {
          String v = "{\"ts\":" + (T0 + offset[0]) + "}";
          ProducerRecord<String, String> r = p.onSend(new ProducerRecord<>("orders", null, T0, "k", v));
          p.onAcknowledgement(new RecordMetadata(tp, offset[0]++, 0, T0, 1, v.length()), null, r.headers());
        };
    try {
      AuditMetrics m = p.metrics();
      sendOne.run();
      // The first report counts it, then tries to send it.
      await(() -> m.getCounted() == 1 && m.getAuditSendFailures() >= 1, 3_000, () -> "counted " + m.getCounted() + ", send failures " + m.getAuditSendFailures());
      // Three chunks of acknowledgements handed over while reports keep failing.
      for (int k = 0; k < 3 * 4096 + 5; k++) {
        sendOne.run();
      }
      long sent = offset[0];
      long failuresBefore = m.getAuditSendFailures();
      await(() -> m.getCounted() == sent && m.getAuditSendFailures() > failuresBefore, 3_000, () -> "counted " + m.getCounted() + " of " + sent);
      await(() -> m.getBacklog() == 0, 3_000, () -> "backlog " + m.getBacklog());
      // At close the refused report is tried again every 100 ms until the deadline (a
      // client closed before its audit topic's metadata came gets it sent), then lost.
      p.emitter().closeTimeoutMs = 1_000;
      long tries = m.getAuditSendFailures();
      long t0 = System.nanoTime();
      p.close();
      long tookMs = (System.nanoTime() - t0) / 1_000_000;
      assertTrue(tookMs >= 900 && m.getAuditSendFailures() - tries >= 5, "close took " + tookMs + " ms, " + (m.getAuditSendFailures() - tries) + " tries");
      assertTrue(m.getAuditMessagesLost() >= 1, "lost " + m.getAuditMessagesLost());
    } finally {
      p.close();
    }
    Map<String, Object> cc = config(false);
    cc.put("kafka_audit.report.interval.ms", "100");
    AuditConsumerInterceptor<String, String> i = new AuditConsumerInterceptor<>();
    i.configure(cc);
    try {
      AuditMetrics m = i.metrics();
      TopicPartition orders = new TopicPartition("orders", 1);
      i.onConsume(batch(orders, 0, 10));
      i.onCommit(Map.of(orders, new OffsetAndMetadata(10)));
      await(() -> m.getCounted() == 10 && m.getAuditSendFailures() >= 1, 3_000, () -> "counted " + m.getCounted() + ", send failures " + m.getAuditSendFailures());
      i.onConsume(batch(orders, 10, 5_000));
      i.onCommit(Map.of(orders, new OffsetAndMetadata(5_000)));
      await(() -> m.getCounted() == 5_000, 3_000, () -> "counted " + m.getCounted());
      await(() -> m.getBacklog() == 0, 3_000, () -> "backlog " + m.getBacklog());
      i.emitter().closeTimeoutMs = 1_000;
    } finally {
      i.close();
    }
  }

  static ConsumerRecords<String, String> batch(TopicPartition tp, long from, long to) {
    List<ConsumerRecord<String, String>> rs = new ArrayList<>();
    for (long o = from; o < to; o++) {
      String v = "{\"ts\":" + (T0 + o) + "}";
      rs.add(
          new ConsumerRecord<>(
              tp.topic(), tp.partition(), o, T0 + o, TimestampType.CREATE_TIME, 2, v.length(), "k" + (o % 10), v, new RecordHeaders(), Optional.empty()));
    }
    return new ConsumerRecords<>(Map.of(tp, rs), Map.of());
  }

  @Test
  void a_consumer_counts_what_its_group_committed_each_offset_once() throws Exception {
    AuditConsumerInterceptor<String, String> i = new AuditConsumerInterceptor<>();
    i.configure(config(false));
    try {
      TopicPartition tp = new TopicPartition("orders", 3);
      ConsumerRecords<String, String> first = batch(tp, 0, 10);
      assertSame(first, i.onConsume(first), "records handed on unchanged");
      assertEquals(List.of(), i.drainForTest(ID, T0), "nothing committed, nothing counted");
      i.onCommit(Map.of(tp, new OffsetAndMetadata(5)));
      assertTrue(i.drainForTest(ID, T0).get(0).contains("\"count\":5,"));
      // Read again from 3 (a seek back): 3 and 4 were counted, 5..9 are replaced.
      i.onConsume(batch(tp, 3, 13));
      i.onCommit(Map.of(tp, new OffsetAndMetadata(13)));
      String inc = i.drainForTest(ID, T0).get(0);
      assertTrue(inc.contains("\"count\":8,"), inc);
      // The latest record time counted (offset 12's): the record-time evidence.
      assertTrue(inc.contains("{\"partition\":3,\"min\":5,\"max\":12,\"max_record_time\":" + (T0 + 12) + "}"), inc);
      assertEquals(13, i.metrics().getCounted());
      assertEquals(7, i.metrics().getDiscardedReread());
      assertEquals(0, i.metrics().getUncommitted());
      // Never committed: never counted.
      i.onConsume(batch(tp, 13, 20));
      assertEquals(List.of(), i.drainForTest(ID, T0));
      assertEquals(7, i.metrics().getUncommitted());
    } finally {
      i.close();
    }
  }
}
