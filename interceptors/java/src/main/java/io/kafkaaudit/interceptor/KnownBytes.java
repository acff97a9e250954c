package io.kafkaaudit.interceptor;

import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.BytesDeserializer;
import org.apache.kafka.common.serialization.BytesSerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Bytes;

/**
 * The bytes on the wire of a key or value, where the configured (de)serializer makes
 * them known without running it: Kafka's own {@code ByteArray}, {@code Bytes} and
 * {@code String} (de)serializers, exactly those classes (a subclass may do anything).
 * For any other type the bytes are {@link #UNSEEN}: such records are counted apart,
 * never guessed (docs/java-interceptors.md). What is derived here is checked against
 * the serialized sizes the client reports, so a mismatch is counted apart too.
 */
final class KnownBytes {
  /** The bytes are not known. */
  static final byte[] UNSEEN = new byte[0];

  private enum Kind {
    BYTE_ARRAY,
    BYTES,
    STRING,
    UNKNOWN
  }

  private final Kind kind;
  private final Charset charset;

  private KnownBytes(Kind kind, Charset charset) {
    this.kind = kind;
    this.charset = charset;
  }

  /** For the client's {@code key.*} or {@code value.*} (de)serializer. */
  static KnownBytes of(Map<String, ?> configs, boolean isKey, boolean producer) {
    String prefix = isKey ? "key." : "value.";
    String role = producer ? "serializer" : "deserializer";
    Object cls = configs.get(prefix + role);
    String name = cls instanceof Class ? ((Class<?>) cls).getName() : cls == null ? "" : cls.toString().trim();
    Kind kind;
    if (name.equals(ByteArraySerializer.class.getName()) || name.equals(ByteArrayDeserializer.class.getName())) {
      kind = Kind.BYTE_ARRAY;
    } else if (name.equals(BytesSerializer.class.getName()) || name.equals(BytesDeserializer.class.getName())) {
      kind = Kind.BYTES;
    } else if (name.equals(StringSerializer.class.getName()) || name.equals(StringDeserializer.class.getName())) {
      kind = Kind.STRING;
    } else {
      kind = Kind.UNKNOWN;
    }
    // StringSerializer's own lookup: key./value.<role>.encoding, then <role>.encoding.
    Object enc = configs.get(prefix + role + ".encoding");
    if (enc == null) {
      enc = configs.get(role + ".encoding");
    }
    Charset cs = StandardCharsets.UTF_8;
    if (enc instanceof String) {
      cs = Charset.forName((String) enc);
    }
    return new KnownBytes(kind, cs);
  }

  /** The bytes of {@code data} (null for null), or {@link #UNSEEN}. */
  byte[] bytes(Object data) {
    if (data == null) {
      // Kafka's serializers write null as null; any other may not.
      return kind == Kind.UNKNOWN ? UNSEEN : null;
    }
    switch (kind) {
      case BYTE_ARRAY:
        return data instanceof byte[] ? (byte[]) data : UNSEEN;
      case BYTES:
        return data instanceof Bytes ? ((Bytes) data).get() : UNSEEN;
      case STRING:
        return data instanceof String ? ((String) data).getBytes(charset) : UNSEEN;
      default:
        return UNSEEN;
    }
  }
}
