package io.kafkaaudit.interceptor;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Publishes the counts: every report interval, on its own thread, the aggregator is
 * drained into audit messages with fresh UUIDs and sent to the audit topic by an
 * internal producer ({@code acks=all}, idempotent, keyed by the audited topic like
 * audit-lib's Kafka sink). At least once: a report the audit topic did not
 * acknowledge is sent again, the same bytes and so the same UUIDs (the collector
 * deduplicates), and until it is acknowledged the counts stay merged in the
 * aggregator's windows (memory grows with windows, not with messages). The
 * application's threads never wait for it, except in {@link #close}, which flushes
 * the last counts for at most {@link #CLOSE_TIMEOUT_MS}.
 */
final class AuditEmitter {
  private static final Logger log = LoggerFactory.getLogger(AuditEmitter.class);
  static final long CLOSE_TIMEOUT_MS = 15_000;
  /** {@link #CLOSE_TIMEOUT_MS}, shorter in tests. */
  long closeTimeoutMs = CLOSE_TIMEOUT_MS;

  private final AuditSettings settings;
  private final Aggregator aggregator;
  /** Guards {@link #aggregator}: held by callbacks for one record, by the reporter for a drain. */
  final Object lock = new Object();
  private final KafkaProducer<byte[], byte[]> producer;
  private final ScheduledExecutorService timer;
  final AuditMetrics metrics;
  /** Reports not acknowledged yet: sent again as they are. */
  private final ConcurrentLinkedQueue<ProducerRecord<byte[], byte[]>> failed = new ConcurrentLinkedQueue<>();
  private final Object idle = new Object();
  private int inFlight; // guarded by idle
  private final Runnable beforeReport;

  AuditEmitter(AuditSettings settings, AuditMetrics metrics, Runnable beforeReport) {
    this.settings = settings;
    this.metrics = metrics;
    this.beforeReport = beforeReport;
    this.aggregator = new Aggregator(settings.eventTime, true, 10_000);
    Properties p = new Properties();
    p.putAll(settings.producer);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.putIfAbsent(ProducerConfig.CLIENT_ID_CONFIG, "kafka-audit-" + (settings.clientId.isEmpty() ? "client" : settings.clientId));
    p.putIfAbsent(ProducerConfig.LINGER_MS_CONFIG, "20");
    // Never waits in send(), for metadata or buffer space: the reporter's thread also
    // does the counting the application's threads hand over, which would pile up in the
    // heap behind a waiting send (a record at a time, for as long as the audit cluster is
    // unreachable). A send refused at once is kept and sent again with the next report;
    // the audit topic's metadata is fetched ahead (below) and kept while reports use it.
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "0");
    p.putIfAbsent(
        ProducerConfig.METADATA_MAX_IDLE_CONFIG, String.valueOf(Math.max(300_000L, 3 * settings.reportIntervalMs)));
    // A report not acknowledged within this is sent again (same UUIDs) by the next one.
    p.putIfAbsent(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
    p.putIfAbsent(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
    p.remove(ProducerConfig.INTERCEPTOR_CLASSES_CONFIG);
    this.producer = new KafkaProducer<>(p);
    this.timer =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "kafka-audit-reporter-" + settings.clientId);
              t.setDaemon(true);
              return t;
            });
    timer.execute(this::fetchMetadata);
    long every = settings.reportIntervalMs;
    timer.scheduleWithFixedDelay(this::reportQuietly, every, every, TimeUnit.MILLISECONDS);
    timer.scheduleAtFixedRate(() -> coarseNow = System.currentTimeMillis(), 10, 10, TimeUnit.MILLISECONDS);
  }

  private volatile long coarseNow = System.currentTimeMillis();

  /**
   * The time to within ~10 ms (more while this thread is busy), without a clock read:
   * when a record was sent, which windows a failed delivery that has no other time.
   */
  long coarseNow() {
    return coarseNow;
  }

  /** An interceptor's start, either kind: the emitter running, its counters in JMX. */
  static AuditEmitter start(AuditSettings settings, String role, Runnable beforeReport) {
    AuditEmitter e = new AuditEmitter(settings, new AuditMetrics(), beforeReport);
    e.metrics.register(role, settings.clientId);
    log.info(
        "kafka-audit: {} tier {} in {} as {}, reporting every {} ms to {}",
        role,
        settings.identity.tier,
        settings.identity.datacenter,
        settings.identity.host,
        settings.reportIntervalMs,
        settings.auditTopic);
    return e;
  }

  /** What was counted and not reported yet, as the next report would send it (tests). */
  java.util.List<String> drainForTest(AuditJson.Identity id, long now) throws Exception {
    return runAndWait(
        () -> {
          beforeReport.run();
          java.util.List<String> out = new java.util.ArrayList<>();
          synchronized (lock) {
            for (Aggregator.Increment inc : aggregator.drain()) {
              out.add(AuditJson.increment(id, new java.util.UUID(0, out.size()), now, inc));
            }
          }
          return out;
        });
  }

  Aggregator aggregator() {
    return aggregator;
  }

  /** Runs {@code task} on the reporter's thread after everything handed over before it, and waits (tests). */
  <T> T runAndWait(java.util.concurrent.Callable<T> task) throws Exception {
    return timer.submit(task).get(30, TimeUnit.SECONDS);
  }

  /**
   * Runs {@code task} on the reporter's thread, in order with the reports: where the
   * interceptors do the counting the application's threads (and the producer's I/O
   * thread) hand over. A task that throws is counted, never propagated.
   */
  void submit(Runnable task) {
    submit(task, 0);
  }

  /** {@link #submit(Runnable)}, its {@code records} in {@code Backlog} until it has run. */
  void submit(Runnable task, long records) {
    metrics.backlog.add(records);
    Runnable counted =
        () -> {
          try {
            task.run();
          } finally {
            metrics.backlog.add(-records);
          }
        };
    try {
      timer.execute(
          () -> {
            try {
              counted.run();
            } catch (Throwable t) {
              metrics.internalErrors.increment();
            }
          });
    } catch (java.util.concurrent.RejectedExecutionException closed) {
      // After close began: the closing thread does what is left (see close).
      counted.run();
    }
  }

  /** Asks for the audit topic's metadata, without waiting: the first report then finds it. */
  private void fetchMetadata() {
    try {
      producer.partitionsFor(settings.auditTopic);
    } catch (RuntimeException notYet) {
      // Requested; it arrives on the audit producer's own thread.
    }
  }

  private void reportQuietly() {
    try {
      report();
    } catch (Throwable t) {
      metrics.internalErrors.increment();
      log.warn("kafka-audit: report to {} failed; the counts are kept for the next one", settings.auditTopic, t);
    }
  }

  /**
   * Sends what was counted, unless the previous report is still unacknowledged. False
   * when the audit producer refused to take it at once (kept for the next report).
   */
  private boolean report() {
    // What was handed over is counted whatever becomes of the sending.
    beforeReport.run();
    synchronized (idle) {
      if (inFlight > 0) {
        return true;
      }
    }
    List<ProducerRecord<byte[], byte[]>> batch = new ArrayList<>();
    for (ProducerRecord<byte[], byte[]> r; (r = failed.poll()) != null; ) {
      batch.add(r);
    }
    if (batch.isEmpty()) {
      List<Aggregator.Increment> drained;
      synchronized (lock) {
        drained = aggregator.drain();
      }
      long now = System.currentTimeMillis();
      for (Aggregator.Increment inc : drained) {
        String json = AuditJson.increment(settings.identity, UUID.randomUUID(), now, inc);
        batch.add(
            new ProducerRecord<>(
                settings.auditTopic, inc.topic.getBytes(StandardCharsets.UTF_8), json.getBytes(StandardCharsets.UTF_8)));
      }
    }
    if (batch.isEmpty()) {
      return true;
    }
    synchronized (idle) {
      inFlight += batch.size();
    }
    boolean refused = false;
    int kept = 0;
    for (ProducerRecord<byte[], byte[]> r : batch) {
      if (!refused) {
        try {
          // Refused at once (no metadata for the audit topic yet, its buffer full): the
          // producer hands the error to the callback before send() returns.
          refused = failedAtOnce(producer.send(r, (md, e) -> delivered(r, e)));
        } catch (RuntimeException e) {
          delivered(r, e);
          refused = true;
        }
        continue;
      }
      // After a refusal the rest would be refused too: kept, not tried, for the next report.
      failed.add(r);
      kept++;
    }
    if (kept > 0) {
      metrics.auditSendFailures.add(kept);
      synchronized (idle) {
        inFlight -= kept;
        idle.notifyAll();
      }
      log.warn("kafka-audit: {} more audit messages to {} kept for the next report", kept, settings.auditTopic);
    }
    return !refused;
  }

  /** Whether a send's outcome was a failure before send() returned. */
  private static boolean failedAtOnce(Future<RecordMetadata> sent) {
    if (!sent.isDone()) {
      return false;
    }
    try {
      sent.get();
      return false;
    } catch (ExecutionException e) {
      return true;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  private void delivered(ProducerRecord<byte[], byte[]> r, Exception e) {
    if (e == null) {
      metrics.auditMessagesSent.increment();
    } else {
      metrics.auditSendFailures.increment();
      failed.add(r);
      log.warn("kafka-audit: an audit message to {} was not delivered ({}); it is sent again", settings.auditTopic, e.toString());
    }
    synchronized (idle) {
      inFlight--;
      idle.notifyAll();
    }
  }

  /** Waits until no report is in flight; false when the deadline passed first. */
  private boolean awaitIdle(long deadline) {
    synchronized (idle) {
      while (inFlight > 0) {
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) {
          return false;
        }
        try {
          idle.wait(left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
      return true;
    }
  }

  /** The last counts out, then the audit producer closed: bounded by {@link #CLOSE_TIMEOUT_MS}. */
  void close() {
    long deadline = System.currentTimeMillis() + closeTimeoutMs;
    // Counting handed over before close runs first (shutdown lets queued tasks finish).
    timer.shutdown();
    try {
      timer.awaitTermination(closeTimeoutMs / 3, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    try {
      // What was handed over since the last report, before anything is judged empty.
      beforeReport.run();
      // A report in flight first, then what is left (failed ones are sent again). A
      // report refused at once (a client closed before the audit topic's metadata came:
      // the refusal asked for it) is tried again every 100 ms until the deadline.
      for (int attempt = 0; attempt < 3 && System.currentTimeMillis() < deadline; ) {
        awaitIdle(deadline);
        boolean empty;
        synchronized (lock) {
          empty = aggregator.isEmpty();
        }
        if (empty && failed.isEmpty()) {
          break;
        }
        if (report()) {
          attempt++;
        } else {
          Thread.sleep(Math.max(1, Math.min(100, deadline - System.currentTimeMillis())));
        }
      }
      awaitIdle(deadline);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Throwable t) {
      metrics.internalErrors.increment();
      log.warn("kafka-audit: the last report failed", t);
    }
    long left = Math.max(0, deadline - System.currentTimeMillis());
    producer.close(java.time.Duration.ofMillis(left));
    int lost = failed.size();
    synchronized (lock) {
      lost += aggregator.drain().size();
    }
    if (lost > 0) {
      metrics.auditMessagesLost.add(lost);
      log.error(
          "kafka-audit: {} audit messages were not delivered to {} before the client closed; their counts are lost",
          lost,
          settings.auditTopic);
    }
  }
}
