package io.kafkaaudit.interceptor;

import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * The record {@code onSend} hands on: the application's record, field for field, whose
 * headers object carries what the interceptor read from the payload. Kafka passes that
 * very headers object to {@code onAcknowledgement} (KIP-512, kafka-clients 4.1), so the
 * acknowledgement finds the payload's event time and checksum hash without a lookup,
 * exactly, on whichever thread it runs. (ProducerRecord copies the headers it is
 * given, hence the overridden {@link #headers()}.)
 */
final class SentRecord<K, V> extends ProducerRecord<K, V> {
  private final SentHeaders headers;

  SentRecord(ProducerRecord<K, V> r, SentHeaders headers) {
    super(r.topic(), r.partition(), r.timestamp(), r.key(), r.value(), (Iterable<Header>) null);
    this.headers = headers;
  }

  @Override
  public Headers headers() {
    return headers;
  }

  @Override
  public String toString() {
    return "ProducerRecord(topic=" + topic() + ", partition=" + partition() + ", headers=" + headers + ", key=" + key()
        + ", value=" + value() + ", timestamp=" + timestamp() + ")";
  }

  /**
   * The record's headers, and what the payload gave, read on the sending thread. Flat:
   * the acknowledgement arrives milliseconds later on the I/O thread, when this object
   * is long out of the cache; every further object to follow would be another miss
   * there (measured: most of the interceptor's cost on the I/O thread).
   */
  static final class SentHeaders extends RecordHeaders {
    final String topic;
    final EventTimeConfig.Rule rule;
    /** The record's own timestamp, or null (the producer then stamps it at send). */
    final Long timestamp;
    final long sentAt;
    /** Whether key and value bytes were known; then the fields below are set. */
    final boolean seen;
    final int keySize;
    final int valueSize;
    final long hash;
    /** {@link Classifier.PayloadTime}'s parts. */
    final int payloadKind;
    final int fieldIndex;
    final TimeParse.Outcome found;
    final long foundMs;
    final TimeParse.TimeUnit foundUnit;

    SentHeaders(Headers original, String topic, EventTimeConfig.Rule rule, Long timestamp, long sentAt, byte[] key, byte[] value) {
      super(original);
      this.topic = topic;
      this.rule = rule;
      this.timestamp = timestamp;
      this.sentAt = sentAt;
      this.seen = key != KnownBytes.UNSEEN && value != KnownBytes.UNSEEN;
      if (seen) {
        keySize = key == null ? -1 : key.length;
        valueSize = value == null ? -1 : value.length;
        hash = MessageHash.of(key, value);
        Classifier.PayloadTime p = Classifier.scanPayload(rule, value);
        payloadKind = p.kind;
        fieldIndex = p.fieldIndex;
        found = p.found == null ? null : p.found.outcome;
        foundMs = p.found == null ? 0 : p.found.ms;
        foundUnit = p.found == null ? null : p.found.unit;
      } else {
        keySize = 0;
        valueSize = 0;
        hash = 0;
        payloadKind = Classifier.PayloadTime.ABSENT;
        fieldIndex = 0;
        found = null;
        foundMs = 0;
        foundUnit = null;
      }
    }

    long byteLen() {
      return Math.max(keySize, 0) + Math.max(valueSize, 0);
    }
  }
}
