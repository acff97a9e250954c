package io.kafkaaudit.interceptor;

import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The producer tier of kafka-audit for Kafka's Java producer, by configuration:
 * {@code interceptor.classes=io.kafkaaudit.interceptor.AuditProducerInterceptor} and
 * {@code kafka_audit.datacenter=...}. It counts what the cluster acknowledged, into
 * audit-lib's windows with the same event-time rules, checksum and latency histogram,
 * and publishes audit messages identical to audit-lib's (docs/java-interceptors.md).
 *
 * <p>{@code onSend} (the sending thread) reads the key and value bytes where the
 * configured serializer makes them known (ByteArray, Bytes, String), hashes them and
 * scans the payload for its event time; {@code onAcknowledgement} (the I/O thread)
 * finishes the classification with the record timestamp the broker acknowledged and
 * counts the record with its partition and offset. Failed deliveries are counted
 * apart ({@code delivery_failed_count}); records whose bytes it cannot see are not
 * counted but reported in JMX. Nothing here throws into the application or waits for
 * the audit topic.
 */
public final class AuditProducerInterceptor<K, V> implements ProducerInterceptor<K, V> {
  private static final Logger log = LoggerFactory.getLogger(AuditProducerInterceptor.class);

  private AuditEmitter emitter;
  private AuditMetrics metrics;
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
    metrics = new AuditMetrics();
    emitter = new AuditEmitter(settings, metrics, () -> {});
    metrics.register("producer", settings.clientId);
    log.info(
        "kafka-audit: producer tier {} in {} as {}, reporting every {} ms to {}",
        settings.identity.tier,
        settings.identity.datacenter,
        settings.identity.host,
        settings.reportIntervalMs,
        settings.auditTopic);
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

  /** What was counted and not reported yet, as the next report would send it (tests). */
  java.util.List<String> drainForTest(AuditJson.Identity id, long now) {
    java.util.List<String> out = new java.util.ArrayList<>();
    synchronized (emitter.lock) {
      for (Aggregator.Increment inc : emitter.aggregator().drain()) {
        out.add(AuditJson.increment(id, new java.util.UUID(0, out.size()), now, inc));
      }
    }
    return out;
  }

  @Override
  public ProducerRecord<K, V> onSend(ProducerRecord<K, V> record) {
    if (emitter == null) {
      return record;
    }
    try {
      String topic = record.topic();
      EventTimeConfig.Rule rule = rules.computeIfAbsent(topic, config::ruleFor);
      SentRecord.Sent sent =
          new SentRecord.Sent(
              topic, rule, record.timestamp(), System.currentTimeMillis(), keys.bytes(record.key()), values.bytes(record.value()));
      return new SentRecord<>(record, sent);
    } catch (Throwable t) {
      metrics.internalErrors.increment();
      return record;
    }
  }

  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
    // Only a client without KIP-512 calls this one, and configure refuses those.
    metrics.uncorrelated.increment();
  }

  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception, Headers headers) {
    if (emitter == null) {
      return;
    }
    try {
      acknowledged(metadata, exception, headers);
    } catch (Throwable t) {
      metrics.internalErrors.increment();
    }
  }

  private void acknowledged(RecordMetadata metadata, Exception exception, Headers headers) {
    if (!(headers instanceof SentRecord.SentHeaders)) {
      // An interceptor after this one replaced the record (or its headers).
      metrics.uncorrelated.increment();
      return;
    }
    SentRecord.Sent sent = ((SentRecord.SentHeaders) headers).sent;
    long now = System.currentTimeMillis();
    Classifier.Headers lookup = name -> first(headers, name);
    if (exception != null) {
      // Windowed as it would have been: the payload's time, else the record's own
      // timestamp (or, unstamped, when it was sent: the producer stamps it then).
      long stamp = sent.timestamp != null ? sent.timestamp : sent.sentAt;
      long countedAt = stamp;
      if (sent.seen) {
        countedAt =
            Classifier.finish(sent.rule, sent.payload, lookup, new Classifier.RecordTimestamp(stamp, false), now)
                .countedAt(now);
      }
      synchronized (emitter.lock) {
        emitter.aggregator().deliveryFailed(sent.topic, countedAt);
      }
      metrics.deliveryFailed.increment();
      return;
    }
    if (!sent.seen
        || !sizeMatches(sent.keySize, metadata.serializedKeySize())
        || !sizeMatches(sent.valueSize, metadata.serializedValueSize())) {
      metrics.unseenBytes.increment();
      return;
    }
    Classifier.RecordTimestamp ts =
        metadata.hasTimestamp() ? new Classifier.RecordTimestamp(metadata.timestamp(), false) : null;
    Classifier.Classification c = Classifier.finish(sent.rule, sent.payload, lookup, ts, now);
    long offset = metadata.hasOffset() ? metadata.offset() : -1;
    synchronized (emitter.lock) {
      emitter.aggregator().record(sent.topic, c, sent.hash, sent.byteLen(), now, metadata.partition(), offset);
    }
    metrics.counted.increment();
  }

  private static boolean sizeMatches(int known, int reported) {
    return known == reported;
  }

  /** The first header named {@code name}: audit-lib's rule (a null value is no header). */
  static byte[] first(Headers headers, String name) {
    Iterator<Header> it = headers.headers(name).iterator();
    return it.hasNext() ? it.next().value() : null;
  }

  @Override
  public void close() {
    if (emitter != null) {
      emitter.close();
      metrics.unregister();
      emitter = null;
    }
  }
}
