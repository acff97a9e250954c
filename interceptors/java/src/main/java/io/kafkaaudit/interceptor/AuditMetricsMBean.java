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
}
