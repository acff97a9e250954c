package io.kafkaaudit.interceptor;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.LongAdder;
import javax.management.ObjectName;

/** The counters behind {@link AuditMetricsMBean}, registered in JMX while the client lives. */
final class AuditMetrics implements AuditMetricsMBean {
  final LongAdder counted = new LongAdder();
  final LongAdder deliveryFailed = new LongAdder();
  final LongAdder unseenBytes = new LongAdder();
  final LongAdder uncorrelated = new LongAdder();
  final LongAdder uncommitted = new LongAdder();
  final LongAdder discardedReread = new LongAdder();
  final LongAdder uncommittedOverflow = new LongAdder();
  final LongAdder auditMessagesSent = new LongAdder();
  final LongAdder auditSendFailures = new LongAdder();
  final LongAdder auditMessagesLost = new LongAdder();
  final LongAdder internalErrors = new LongAdder();
  final LongAdder backlog = new LongAdder();
  final LongAdder backlogOverflow = new LongAdder();
  final LongAdder commitsDropped = new LongAdder();
  final LongAdder auditProducerFailures = new LongAdder();
  private ObjectName name;

  void register(String role, String clientId) {
    try {
      ObjectName n =
          new ObjectName("io.kafkaaudit:type=" + role + "-interceptor,client-id=" + ObjectName.quote(clientId));
      ManagementFactory.getPlatformMBeanServer().registerMBean(this, n);
      name = n;
    } catch (Exception | LinkageError e) {
      // Two clients with one client.id, or no JMX: the counters still count.
    }
  }

  void unregister() {
    if (name != null) {
      try {
        ManagementFactory.getPlatformMBeanServer().unregisterMBean(name);
      } catch (Exception e) {
        // already gone
      }
    }
  }

  @Override
  public long getCounted() {
    return counted.sum();
  }

  @Override
  public long getDeliveryFailed() {
    return deliveryFailed.sum();
  }

  @Override
  public long getUnseenBytes() {
    return unseenBytes.sum();
  }

  @Override
  public long getUncorrelated() {
    return uncorrelated.sum();
  }

  @Override
  public long getUncommitted() {
    return uncommitted.sum();
  }

  @Override
  public long getDiscardedReread() {
    return discardedReread.sum();
  }

  @Override
  public long getUncommittedOverflow() {
    return uncommittedOverflow.sum();
  }

  @Override
  public long getAuditMessagesSent() {
    return auditMessagesSent.sum();
  }

  @Override
  public long getAuditSendFailures() {
    return auditSendFailures.sum();
  }

  @Override
  public long getAuditMessagesLost() {
    return auditMessagesLost.sum();
  }

  @Override
  public long getInternalErrors() {
    return internalErrors.sum();
  }

  @Override
  public long getBacklog() {
    return backlog.sum();
  }

  @Override
  public long getBacklogOverflow() {
    return backlogOverflow.sum();
  }

  @Override
  public long getCommitsDropped() {
    return commitsDropped.sum();
  }

  @Override
  public long getAuditProducerFailures() {
    return auditProducerFailures.sum();
  }
}
