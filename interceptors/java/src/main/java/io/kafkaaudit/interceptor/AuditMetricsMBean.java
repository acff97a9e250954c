package io.kafkaaudit.interceptor;

/**
 * The interceptors' own counters, registered in JMX as
 * {@code io.kafkaaudit:type=producer-interceptor|consumer-interceptor,client-id=<client.id>}.
 * Tier-local numbers: what the audit messages cannot say (docs/java-interceptors.md).
 */
public interface AuditMetricsMBean {
  /** Producer: records the cluster acknowledged and that were counted. */
  long getCounted();

  /** Producer: records whose delivery failed (in {@code delivery_failed_count}, not in {@code count}). */
  long getDeliveryFailed();

  /** Producer: acknowledged records whose bytes the interceptor could not see (not counted). */
  long getUnseenBytes();

  /** Producer: acknowledgements without the interceptor's state (a later interceptor replaced the record). */
  long getUncorrelated();

  /** Consumer: records read, waiting for a commit. */
  long getUncommitted();

  /** Consumer: records read again (a seek, a rebalance) whose first reading was discarded. */
  long getDiscardedReread();

  /** Consumer: records read but dropped uncounted beyond the bound of uncommitted records. */
  long getUncommittedOverflow();

  /** Audit messages the audit topic acknowledged. */
  long getAuditMessagesSent();

  /** Attempts to send an audit message that failed (each is sent again, same UUID). */
  long getAuditSendFailures();

  /** Audit messages still undelivered when the client closed: their counts are lost. */
  long getAuditMessagesLost();

  /** Exceptions inside the interceptor, caught (the record is then not counted). */
  long getInternalErrors();

  /**
   * Records handed to the reporter's thread and not counted yet (producer: in chunks of
   * 4 096 acknowledgements; consumer: records read). Near zero unless that thread is
   * short of CPU.
   */
  long getBacklog();

  /**
   * Records dropped uncounted because the reporter's thread was that far behind: the
   * backlog is capped at {@code 100 000} records (and, consumer, 64 MiB of records read).
   */
  long getBacklogOverflow();

  /**
   * Consumer: commits not handed to the reporter's thread because 10 000 tasks were
   * already waiting for it (the next commit of a partition counts what it would have).
   */
  long getCommitsDropped();

  /**
   * Attempts to create the audit producer that Kafka refused (a trust store it cannot
   * read, a JAAS configuration it rejects, ...): tried again at each report, logged.
   */
  long getAuditProducerFailures();
}
