package io.kafkaaudit.interceptor;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.TimestampType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The consumer tier of kafka-audit for Kafka's Java consumer, by configuration:
 * {@code interceptor.classes=io.kafkaaudit.interceptor.AuditConsumerInterceptor} and
 * {@code kafka_audit.datacenter=...}. It counts what the group committed, as the
 * librdkafka plugin does: {@code onConsume} classifies each record when the
 * application gets it (observation time: then) and keeps its contribution (window,
 * checksum hash, size, latency, offset; not the record) per partition; {@code onCommit}
 * counts the kept records below the committed offset. A record read again (a seek
 * back, a partition read again from its committed offset) replaces the copy kept from
 * its first reading, and one read again behind this client's last commit of its
 * partition was counted already, so each offset is counted once. A consumer that
 * never commits counts nothing (docs/java-interceptors.md).
 */
public final class AuditConsumerInterceptor<K, V> implements ConsumerInterceptor<K, V> {
  private static final Logger log = LoggerFactory.getLogger(AuditConsumerInterceptor.class);
  /** Records kept per client until committed (~70 MB at most); beyond, the oldest are dropped uncounted. */
  static final int MAX_UNCOMMITTED = 1_000_000;

  private volatile AuditEmitter emitter;
  private volatile AuditMetrics metrics;
  private KnownBytes keys;
  private KnownBytes values;
  private EventTimeConfig config;
  private final Map<String, EventTimeConfig.Rule> rules = new HashMap<>();
  /** Touched on the reporter's thread only (the lock is for the tests' reads). */
  private final Map<TopicPartition, ArrayDeque<Kept>> uncommitted = new HashMap<>();
  /** Per partition, the highest offset this client's commits have counted up to. */
  private final Map<TopicPartition, Long> countedUpTo = new HashMap<>();
  private int kept;

  /** One record's contribution to its window, as {@link WindowStats#add} takes it. */
  private static final class Kept {
    final long offset;
    final long windowIndex;
    final int kind;
    final long hash;
    final long byteLen;
    final long latencyMs;
    final long observedAt;
    final long recordTime;

    Kept(long offset, long windowIndex, int kind, long hash, long byteLen, long latencyMs, long observedAt, long recordTime) {
      this.offset = offset;
      this.windowIndex = windowIndex;
      this.kind = kind;
      this.hash = hash;
      this.byteLen = byteLen;
      this.latencyMs = latencyMs;
      this.observedAt = observedAt;
      this.recordTime = recordTime;
    }
  }

  @Override
  public void configure(Map<String, ?> configs) {
    AuditSettings settings = AuditSettings.from(configs, "consumer");
    config = settings.eventTime;
    keys = KnownBytes.of(configs, true, false);
    values = KnownBytes.of(configs, false, false);
    emitter = AuditEmitter.start(settings, "consumer", () -> {});
    metrics = emitter.metrics;
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

  /**
   * The records are handed on unchanged and counted on the reporter's thread, in order
   * with the commits: the polling thread only notes the batch and the time.
   */
  @Override
  public ConsumerRecords<K, V> onConsume(ConsumerRecords<K, V> records) {
    AuditEmitter emitter = this.emitter;
    if (emitter == null || records == null) {
      return records;
    }
    try {
      if (records.isEmpty()) {
        return records;
      }
      long now = System.currentTimeMillis();
      // The batch is kept until the reporter's thread counts it: its bytes are capped
      // too (AuditEmitter.MAX_BACKLOG_BYTES); beyond the caps it is dropped, counted.
      long n = 0;
      long bytes = 0;
      for (ConsumerRecord<K, V> r : records) {
        n++;
        bytes += Math.max(0, r.serializedKeySize()) + Math.max(0, r.serializedValueSize());
      }
      emitter.submit(() -> consumed(records, now), n, bytes);
    } catch (Throwable t) {
      metrics.internalErrors.increment();
    }
    return records;
  }

  private void consumed(ConsumerRecords<K, V> records, long now) {
    for (TopicPartition tp : records.partitions()) {
      EventTimeConfig.Rule rule;
      try {
        rule = rules.computeIfAbsent(tp.topic(), config::ruleFor);
      } catch (Throwable t) {
        metrics.internalErrors.increment();
        continue;
      }
      for (ConsumerRecord<K, V> r : records.records(tp)) {
        try {
          consumed(tp, rule, r, now);
        } catch (Throwable t) {
          metrics.internalErrors.increment();
        }
      }
    }
  }

  private void consumed(TopicPartition tp, EventTimeConfig.Rule rule, ConsumerRecord<K, V> r, long now) {
    byte[] key = keys.bytes(r.key());
    byte[] value = values.bytes(r.value());
    if (key == KnownBytes.UNSEEN
        || value == KnownBytes.UNSEEN
        || (key == null ? -1 : key.length) != r.serializedKeySize()
        || (value == null ? -1 : value.length) != r.serializedValueSize()) {
      metrics.unseenBytes.increment();
      return;
    }
    Classifier.RecordTimestamp ts =
        r.timestampType() == TimestampType.NO_TIMESTAMP_TYPE || r.timestamp() < 0
            ? null
            : new Classifier.RecordTimestamp(r.timestamp(), r.timestampType() == TimestampType.LOG_APPEND_TIME);
    Classifier.Classification c =
        Classifier.classify(rule, value, name -> SentRecord.firstHeader(r.headers(), name), ts, now);
    long countedAt = c.countedAt(now);
    Kept k =
        new Kept(
            r.offset(),
            Math.floorDiv(countedAt, config.windowSizeMs),
            WindowStats.kindOf(c),
            MessageHash.of(key, value),
            (key == null ? 0 : key.length) + (value == null ? 0 : value.length),
            WindowStats.saturatingSub(now, countedAt),
            now,
            WindowStats.recordTime(ts, now));
    synchronized (uncommitted) {
      Long counted = countedUpTo.get(tp);
      if (counted != null && k.offset < counted) {
        // Read again behind a commit (a seek back): already counted once.
        metrics.discardedReread.increment();
        return;
      }
      ArrayDeque<Kept> log = uncommitted.computeIfAbsent(tp, x -> new ArrayDeque<>());
      // Read again (a seek back, a partition read again from its committed offset):
      // the copies kept from the first reading are replaced.
      while (!log.isEmpty() && log.peekLast().offset >= k.offset) {
        log.pollLast();
        kept--;
        metrics.discardedReread.increment();
      }
      log.addLast(k);
      kept++;
      if (kept > MAX_UNCOMMITTED) {
        dropOldest();
      }
      metrics.uncommitted.reset();
      metrics.uncommitted.add(kept);
    }
  }

  /** Beyond the bound: the oldest kept record of the longest partition goes, uncounted. */
  private void dropOldest() {
    ArrayDeque<Kept> longest = null;
    for (ArrayDeque<Kept> d : uncommitted.values()) {
      if (longest == null || d.size() > longest.size()) {
        longest = d;
      }
    }
    if (longest != null && !longest.isEmpty()) {
      longest.pollFirst();
      kept--;
      metrics.uncommittedOverflow.increment();
    }
  }

  @Override
  public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {
    AuditEmitter emitter = this.emitter;
    if (emitter == null || offsets == null) {
      return;
    }
    try {
      Map<TopicPartition, OffsetAndMetadata> committed = new HashMap<>(offsets);
      if (!emitter.submit(() -> committed(emitter, committed))) {
        // The reporter's thread that far behind: the partition's next commit counts these.
        metrics.commitsDropped.increment();
      }
    } catch (Throwable t) {
      metrics.internalErrors.increment();
    }
  }

  private void committed(AuditEmitter emitter, Map<TopicPartition, OffsetAndMetadata> offsets) {
    synchronized (uncommitted) {
      synchronized (emitter.lock) {
        Aggregator agg = emitter.aggregator();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
          if (e.getKey() == null || e.getValue() == null) {
            continue;
          }
          long committed = e.getValue().offset();
          countedUpTo.merge(e.getKey(), committed, Math::max);
          ArrayDeque<Kept> log = uncommitted.get(e.getKey());
          if (log == null) {
            continue;
          }
          String topic = e.getKey().topic();
          int partition = e.getKey().partition();
          while (!log.isEmpty() && log.peekFirst().offset < committed) {
            Kept k = log.pollFirst();
            kept--;
            agg.add(topic, k.windowIndex, k.kind, k.hash, k.byteLen, k.latencyMs, k.observedAt, k.recordTime, partition, k.offset);
            metrics.counted.increment();
          }
        }
      }
      metrics.uncommitted.reset();
      metrics.uncommitted.add(kept);
    }
  }

  @Override
  public void close() {
    // Bounded by AuditEmitter.CLOSE_TIMEOUT_MS; throws nothing into the client's close.
    AuditEmitter emitter = this.emitter;
    if (emitter == null) {
      return;
    }
    try {
      closeEmitter(emitter);
    } catch (Throwable t) {
      metrics.internalErrors.increment();
    } finally {
      metrics.unregister();
      this.emitter = null;
    }
  }

  private void closeEmitter(AuditEmitter emitter) {
    // After the commits handed over before (KafkaConsumer.close commits first).
    emitter.submitAlways(
        () -> {
          synchronized (uncommitted) {
            // Never committed: whoever reads these next counts them when it commits.
            if (kept > 0) {
              log.info("kafka-audit: {} records read but not committed are not counted", kept);
            }
            uncommitted.clear();
            kept = 0;
          }
        });
    emitter.close();
  }
}
