package io.kafkaaudit.interceptor;

import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The record {@code onSend} hands on: the application's record, field for field, whose
 * headers object carries what the interceptor read from the payload. Kafka passes that
 * very headers object to {@code onAcknowledgement} (KIP-512, kafka-clients 4.1), so the
 * acknowledgement finds the payload's event time and checksum hash without a lookup,
 * exactly, on whichever thread it runs. (ProducerRecord copies the headers it is
 * given, hence the overridden {@link #headers()}; and since these are no
 * RecordHeaders, a send() that fails early hands them to onAcknowledgement uncopied
 * too.)
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

  /** The first header named {@code name}: audit-lib's rule (a null value is no header). */
  static byte[] firstHeader(Headers headers, String name) {
    java.util.Iterator<Header> it = headers.headers(name).iterator();
    return it.hasNext() ? it.next().value() : null;
  }

  /**
   * The record's headers, and what the payload gave, read on the sending thread. Flat:
   * the acknowledgement arrives milliseconds later on the I/O thread, when this object
   * is long out of the cache; every further object to follow would be another miss
   * there (measured: most of the interceptor's cost on the I/O thread).
   */
  static final class SentHeaders implements Headers, Classifier.Headers {
    /**
     * The application's headers themselves, not a copy: what is sent is what they hold
     * when the producer serializes the record, as without the interceptor.
     */
    private final Headers original;
    final String topic;
    final EventTimeConfig.Rule rule;
    /** The record's own timestamp, or null (the producer then stamps it at send). */
    final Long timestamp;
    final long sentAt;
    /** Whether key and value bytes were known; then the fields below are set. */
    boolean seen;
    int keySize;
    int valueSize;
    long hash;
    /** {@link Classifier.PayloadTime}'s parts. */
    int payloadKind;
    int fieldIndex;
    TimeParse.Outcome found;
    long foundMs;
    TimeParse.TimeUnit foundUnit;

    SentHeaders(Headers original, String topic, EventTimeConfig.Rule rule, Long timestamp, long sentAt) {
      this.original = original;
      this.topic = topic;
      this.rule = rule;
      this.timestamp = timestamp;
      this.sentAt = sentAt;
    }

    /** Hashes and scans the bytes that are sent ({@link KnownBytes#UNSEEN} if unknown). */
    SentHeaders read(byte[] key, byte[] value) {
      seen = key != KnownBytes.UNSEEN && value != KnownBytes.UNSEEN;
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
      }
      return this;
    }

    long byteLen() {
      return Math.max(keySize, 0) + Math.max(valueSize, 0);
    }

    @Override
    public Headers add(Header header) {
      original.add(header);
      return this;
    }

    @Override
    public Headers add(String key, byte[] value) {
      original.add(key, value);
      return this;
    }

    @Override
    public Headers remove(String key) {
      original.remove(key);
      return this;
    }

    @Override
    public byte[] first(String name) {
      return firstHeader(original, name);
    }

    @Override
    public Header lastHeader(String key) {
      return original.lastHeader(key);
    }

    @Override
    public Iterable<Header> headers(String key) {
      return original.headers(key);
    }

    @Override
    public Header[] toArray() {
      return original.toArray();
    }

    @Override
    public java.util.Iterator<Header> iterator() {
      return original.iterator();
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof SentHeaders ? original.equals(((SentHeaders) o).original) : original.equals(o);
    }

    @Override
    public int hashCode() {
      return original.hashCode();
    }

    @Override
    public String toString() {
      return original.toString();
    }
  }
}
