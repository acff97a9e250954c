package io.kafkaaudit.interceptor;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.header.Headers;

/**
 * The producer tier of kafka-audit for Kafka's Java producer, by configuration:
 * {@code interceptor.classes=io.kafkaaudit.interceptor.AuditProducerInterceptor} and
 * {@code kafka_audit.datacenter=...}. It counts what the cluster acknowledged, into
 * audit-lib's windows with the same event-time rules, checksum and latency histogram,
 * and publishes audit messages identical to audit-lib's (docs/java-interceptors.md).
 *
 * <p>The key and value bytes are known where the configured serializer makes them
 * plain (ByteArray, Bytes, String). {@code onSend} (the sending thread) hashes them,
 * scans the payload for its event time and hands on the record with the result in its
 * headers; {@code onAcknowledgement} (the I/O thread) only notes the outcome,
 * partition, offset, record timestamp and time; the reporter's thread then classifies
 * with the acknowledged record timestamp and counts the record. Failed deliveries are counted
 * apart ({@code delivery_failed_count}); records whose bytes it cannot see are not
 * counted but reported in JMX. Nothing here throws into the application or waits for
 * the audit topic.
 */
public final class AuditProducerInterceptor<K, V> implements ProducerInterceptor<K, V> {

  private volatile AuditEmitter emitter;
  private volatile AuditMetrics metrics;
  private KnownBytes keys;
  private KnownBytes values;
  private EventTimeConfig config;
  private final Map<String, EventTimeConfig.Rule> rules = new ConcurrentHashMap<>();

  @Override
  public void configure(Map<String, ?> configs) {
    requireHeadersInAcknowledgements();
    AuditSettings settings = AuditSettings.from(configs, "producer");
    config = settings.eventTime;
    keys = KnownBytes.of(configs, true, true);
    values = KnownBytes.of(configs, false, true);
    emitter = AuditEmitter.start(settings, "producer", this::countPending);
    metrics = emitter.metrics;
  }

  /** Payload and outcome meet through the headers given to onAcknowledgement (KIP-512). */
  private static void requireHeadersInAcknowledgements() {
    try {
      ProducerInterceptor.class.getMethod("onAcknowledgement", RecordMetadata.class, Exception.class, Headers.class);
    } catch (NoSuchMethodException e) {
      throw new ConfigException(
          "io.kafkaaudit.interceptor.AuditProducerInterceptor needs kafka-clients 4.1 or later "
              + "(onAcknowledgement with the record's headers, KIP-512); this client is older");
    }
  }

  AuditMetrics metrics() {
    return metrics;
  }

  AuditEmitter emitter() {
    return emitter;
  }

  /** What was counted and not reported yet, as the next report would send it (tests). */
  java.util.List<String> drainForTest(AuditJson.Identity id, long now) throws Exception {
    return emitter.drainForTest(id, now);
  }

  @Override
  public ProducerRecord<K, V> onSend(ProducerRecord<K, V> record) {
    AuditEmitter emitter = this.emitter;
    if (emitter == null || record == null) {
      return record;
    }
    try {
      String topic = record.topic();
      EventTimeConfig.Rule rule = rules.get(topic);
      if (rule == null) {
        rule = rules.computeIfAbsent(topic, config::ruleFor);
      }
      SentRecord.SentHeaders sent =
          new SentRecord.SentHeaders(record.headers(), topic, rule, record.timestamp(), emitter.coarseNow());
      // Read now, not on the counting thread: keeping the key and value alive until the
      // acknowledgement (and reading them there, out of the cache) cost more CPU per
      // record than the sending thread saves (bench/java-producer.sh, both measured).
      sent.read(keys.bytes(record.key()), values.bytes(record.value()));
      return new SentRecord<>(record, sent);
    } catch (Throwable t) {
      metrics.internalErrors.increment();
      return record;
    }
  }

  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
    // Only a client without KIP-512 calls this one, and configure refuses those.
    AuditMetrics m = metrics;
    if (m != null) {
      m.uncorrelated.increment();
    }
  }

  /**
   * Acknowledgements are only noted here (the producer's I/O thread: its time is the
   * producer's throughput) and counted in chunks on the reporter's thread: the record's
   * state is not even dereferenced here, since it is long out of the cache by now.
   */
  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception, Headers headers) {
    AuditEmitter emitter = this.emitter;
    if (emitter == null) {
      return;
    }
    try {
      long now = System.currentTimeMillis();
      Acks full = null;
      synchronized (this) {
        acks.add(headers, metadata, exception != null, now);
        if (acks.n == Acks.CHUNK) {
          full = acks;
          acks = new Acks();
        }
      }
      if (full != null) {
        Acks chunk = full;
        // Dropped (and counted in BacklogOverflow) if the reporter's thread is that far behind.
        emitter.submit(() -> count(chunk), chunk.n, 0);
      }
    } catch (Throwable t) {
      metrics.internalErrors.increment();
    }
  }

  /** Acknowledgements noted and not counted yet, column by column. */
  private static final class Acks {
    static final int CHUNK = 4096;
    final Object[] headers = new Object[CHUNK];
    final int[] partition = new int[CHUNK];
    final long[] offset = new long[CHUNK];
    /** Long.MIN_VALUE: none. */
    final long[] timestamp = new long[CHUNK];
    final long[] at = new long[CHUNK];
    final boolean[] failed = new boolean[CHUNK];
    final int[] keySize = new int[CHUNK];
    final int[] valueSize = new int[CHUNK];
    int n;

    /**
     * {@code md} is null when Kafka's InterceptorList.onSendError has no partition for
     * the record (send(null), a failure before partitioning): nothing is known then but
     * the failure. The slot is taken only once it is filled.
     */
    void add(Headers h, RecordMetadata md, boolean failed, long at) {
      int i = n;
      headers[i] = h;
      partition[i] = md == null ? -1 : md.partition();
      offset[i] = md != null && md.hasOffset() ? md.offset() : -1;
      timestamp[i] = md != null && md.hasTimestamp() ? md.timestamp() : Long.MIN_VALUE;
      this.at[i] = at;
      this.failed[i] = failed;
      keySize[i] = md == null ? -1 : md.serializedKeySize();
      valueSize[i] = md == null ? -1 : md.serializedValueSize();
      n = i + 1;
    }
  }

  private Acks acks = new Acks();

  /** Counts the acknowledgements noted so far (before a report, and at close; RecordPathBench too). */
  void countPending() {
    Acks chunk;
    synchronized (this) {
      chunk = acks;
      acks = new Acks();
    }
    count(chunk);
  }

  private void count(Acks a) {
    AuditEmitter emitter = this.emitter;
    if (emitter == null) {
      return; // closed: nothing reports these any more
    }
    for (int i = 0; i < a.n; i++) {
      try {
        acknowledged(emitter, a, i);
      } catch (Throwable t) {
        metrics.internalErrors.increment();
      }
    }
  }

  private void acknowledged(AuditEmitter emitter, Acks a, int i) {
    Object headers = a.headers[i];
    if (!(headers instanceof SentRecord.SentHeaders)) {
      // An interceptor after this one replaced the record (or its headers).
      metrics.uncorrelated.increment();
      return;
    }
    SentRecord.SentHeaders sent = (SentRecord.SentHeaders) headers;
    long now = a.at[i];
    Classifier.Headers lookup = sent;
    if (a.failed[i]) {
      // Windowed as it would have been: the payload's time, else the record's own
      // timestamp (or, unstamped, when it was sent: the producer stamps it then).
      long stamp = sent.timestamp != null ? sent.timestamp : sent.sentAt;
      long countedAt = stamp;
      if (sent.seen) {
        countedAt = classify(sent, lookup, new Classifier.RecordTimestamp(stamp, false), now).countedAt(now);
      }
      synchronized (emitter.lock) {
        emitter.aggregator().deliveryFailed(sent.topic, countedAt);
      }
      metrics.deliveryFailed.increment();
      return;
    }
    if (!sent.seen || !sizeMatches(sent.keySize, a.keySize[i]) || !sizeMatches(sent.valueSize, a.valueSize[i])) {
      metrics.unseenBytes.increment();
      return;
    }
    Classifier.RecordTimestamp ts =
        a.timestamp[i] == Long.MIN_VALUE ? null : new Classifier.RecordTimestamp(a.timestamp[i], false);
    Classifier.Classification c = classify(sent, lookup, ts, now);
    synchronized (emitter.lock) {
      emitter.aggregator().record(sent.topic, c, sent.hash, sent.byteLen(), now, ts, a.partition[i], a.offset[i]);
    }
    metrics.counted.increment();
  }

  private static Classifier.Classification classify(
      SentRecord.SentHeaders s, Classifier.Headers lookup, Classifier.RecordTimestamp ts, long now) {
    return Classifier.finish(s.rule, s.payloadKind, s.fieldIndex, s.found, s.foundMs, s.foundUnit, lookup, ts, now);
  }

  private static boolean sizeMatches(int known, int reported) {
    return known == reported;
  }


  @Override
  public void close() {
    // Bounded by AuditEmitter.CLOSE_TIMEOUT_MS; throws nothing into the client's close.
    AuditEmitter e = emitter;
    if (e == null) {
      return;
    }
    try {
      e.close();
    } catch (Throwable t) {
      metrics.internalErrors.increment();
    } finally {
      metrics.unregister();
      emitter = null;
    }
  }
}
