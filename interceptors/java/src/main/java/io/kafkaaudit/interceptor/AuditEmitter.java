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
 * the last counts for at most {@link #CLOSE_TIMEOUT_MS}. What they hand to the
 * reporter's thread is capped ({@link #submit(Runnable, long, long)}); the audit
 * producer is created on that thread, so one that Kafka refuses never fails the client.
 */
final class AuditEmitter {
  private static final Logger log = LoggerFactory.getLogger(AuditEmitter.class);
  static final long CLOSE_TIMEOUT_MS = 15_000;
  /** Records handed to the reporter's thread and not counted yet, at most; beyond, dropped and counted. */
  static final long MAX_BACKLOG_RECORDS = 100_000;
  /** Bytes (serialized keys and values) of consumed records handed over and not counted yet, at most. */
  static final long MAX_BACKLOG_BYTES = 64L << 20;
  /** Tasks waiting for the reporter's thread, at most (commits beyond are dropped and counted). */
  static final int MAX_QUEUED_TASKS = 10_000;
  /** {@link #CLOSE_TIMEOUT_MS}, shorter in tests. */
  long closeTimeoutMs = CLOSE_TIMEOUT_MS;

  private final AuditSettings settings;
  private final Aggregator aggregator;
  /** Guards {@link #aggregator}: held by callbacks for one record, by the reporter for a drain. */
  final Object lock = new Object();
  /**
   * Created on the reporter's thread (its first task), never in the application's: a
   * producer Kafka refuses (a trust store it cannot read, a JAAS configuration it
   * rejects) is logged, counted and tried again at each report, and the client goes on.
   * Null until then; set under {@link #producerLock}.
   */
  private volatile KafkaProducer<byte[], byte[]> producer;
  private final Properties producerProperties;
  private final Object producerLock = new Object();
  private boolean producerClosed; // guarded by producerLock
  private final java.util.concurrent.atomic.AtomicInteger queuedTasks = new java.util.concurrent.atomic.AtomicInteger();
  private final java.util.concurrent.atomic.AtomicLong queuedRecords = new java.util.concurrent.atomic.AtomicLong();
  private final java.util.concurrent.atomic.AtomicLong queuedBytes = new java.util.concurrent.atomic.AtomicLong();
  /** Set once close has counted what is left: what is handed over later is dropped. */
  private volatile boolean finished;
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
    this.producerProperties = p;
    this.timer =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "kafka-audit-reporter-" + settings.clientId);
              t.setDaemon(true);
              return t;
            });
    timer.execute(
        () -> {
          if (createProducer()) {
            fetchMetadata();
          }
        });
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
  boolean submit(Runnable task) {
    return submit(task, 0, 0);
  }

  /**
   * {@link #submit(Runnable)}, its {@code records} ({@code bytes} of them) in {@code
   * Backlog} until it has run. Never waits and never queues without bound: with {@link
   * #MAX_QUEUED_TASKS} tasks, {@link #MAX_BACKLOG_RECORDS} records or {@link
   * #MAX_BACKLOG_BYTES} already waiting for the reporter's thread, the task is dropped
   * (false), its records counted in {@code BacklogOverflow}.
   */
  boolean submit(Runnable task, long records, long bytes) {
    // Not short-circuited: all three are taken, and all three given back if one is over.
    if (queuedTasks.incrementAndGet() > MAX_QUEUED_TASKS
        | queuedRecords.addAndGet(records) > MAX_BACKLOG_RECORDS
        | queuedBytes.addAndGet(bytes) > MAX_BACKLOG_BYTES) {
      release(records, bytes);
      metrics.backlogOverflow.add(records);
      return false;
    }
    return enqueue(task, records, bytes);
  }

  /** {@link #submit(Runnable)} beyond the caps (close's own task). */
  void submitAlways(Runnable task) {
    queuedTasks.incrementAndGet();
    enqueue(task, 0, 0);
  }

  private void release(long records, long bytes) {
    queuedTasks.decrementAndGet();
    queuedRecords.addAndGet(-records);
    queuedBytes.addAndGet(-bytes);
  }

  private boolean enqueue(Runnable task, long records, long bytes) {
    metrics.backlog.add(records);
    Runnable counted =
        () -> {
          try {
            task.run();
          } catch (Throwable t) {
            metrics.internalErrors.increment();
          } finally {
            metrics.backlog.add(-records);
            release(records, bytes);
          }
        };
    try {
      timer.execute(counted);
      return true;
    } catch (java.util.concurrent.RejectedExecutionException closed) {
      if (!finished) {
        // While close runs: counted here, on the caller's thread, and reported by close.
        counted.run();
        return true;
      }
    } catch (Throwable t) {
      metrics.internalErrors.increment();
    }
    metrics.backlog.add(-records);
    release(records, bytes);
    metrics.backlogOverflow.add(records);
    return false;
  }

  /** Whether the audit producer was created (tests). */
  boolean hasProducer() {
    return producer != null;
  }

  /** Whether there is an audit producer: created now if there was none (false: Kafka refused it). */
  private boolean createProducer() {
    if (producer != null) {
      return true;
    }
    KafkaProducer<byte[], byte[]> created;
    try {
      created = new KafkaProducer<>(producerProperties);
    } catch (Throwable t) {
      metrics.auditProducerFailures.increment();
      if (metrics.auditProducerFailures.sum() == 1) {
        log.error(
            "kafka-audit: Kafka refused to create the audit producer for {}; the counts are kept and it is tried again at each report",
            settings.auditTopic,
            t);
      } else {
        log.warn("kafka-audit: Kafka refused to create the audit producer for {} again ({})", settings.auditTopic, t.toString());
      }
      return false;
    }
    synchronized (producerLock) {
      if (!producerClosed) {
        producer = created;
        return true;
      }
    }
    // Closed meanwhile (a close that did not wait for this thread).
    created.close(java.time.Duration.ZERO);
    return false;
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
    if (!createProducer()) {
      // No audit producer (Kafka refused it): the counts stay in the aggregator's windows.
      return true;
    }
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

  /**
   * The last counts out, then the audit producer closed: bounded by {@link
   * #CLOSE_TIMEOUT_MS} (plus the audit producer's forced close, milliseconds). Throws
   * nothing.
   */
  void close() {
    try {
      closeWithin();
    } catch (Throwable t) {
      metrics.internalErrors.increment();
      log.warn("kafka-audit: closing the audit emitter failed", t);
    } finally {
      finished = true;
    }
  }

  private void closeWithin() {
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
      // No audit producer by now: Kafka refused it (the reporter's thread tried first).
      boolean canSend = producer != null;
      // A report in flight first, then what is left (failed ones are sent again). A
      // report refused at once (a client closed before the audit topic's metadata came:
      // the refusal asked for it) is tried again every 100 ms until the deadline.
      for (int attempt = 0; canSend && attempt < 3 && System.currentTimeMillis() < deadline; ) {
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
    KafkaProducer<byte[], byte[]> p;
    synchronized (producerLock) {
      producerClosed = true;
      p = producer;
    }
    if (p != null) {
      try {
        p.close(java.time.Duration.ofMillis(left));
      } catch (Throwable t) {
        metrics.internalErrors.increment();
        log.warn("kafka-audit: closing the audit producer failed", t);
      }
    }
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
