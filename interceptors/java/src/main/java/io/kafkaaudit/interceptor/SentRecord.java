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

  SentRecord(ProducerRecord<K, V> r, Sent sent) {
    super(r.topic(), r.partition(), r.timestamp(), r.key(), r.value(), (Iterable<Header>) null);
    this.headers = new SentHeaders(r.headers(), sent);
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

  /** The record's headers, and the payload's audit state. */
  static final class SentHeaders extends RecordHeaders {
    final Sent sent;

    SentHeaders(Headers original, Sent sent) {
      super(original);
      this.sent = sent;
    }
  }

  /** What the payload gave, read on the sending thread. */
  static final class Sent {
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
    final Classifier.PayloadTime payload;

    Sent(String topic, EventTimeConfig.Rule rule, Long timestamp, long sentAt, byte[] key, byte[] value) {
      this.topic = topic;
      this.rule = rule;
      this.timestamp = timestamp;
      this.sentAt = sentAt;
      this.seen = key != KnownBytes.UNSEEN && value != KnownBytes.UNSEEN;
      if (seen) {
        keySize = key == null ? -1 : key.length;
        valueSize = value == null ? -1 : value.length;
        hash = MessageHash.of(key, value);
        payload = Classifier.scanPayload(rule, value);
      } else {
        keySize = 0;
        valueSize = 0;
        hash = 0;
        payload = null;
      }
    }

    long byteLen() {
      return Math.max(keySize, 0) + Math.max(valueSize, 0);
    }
  }
}
