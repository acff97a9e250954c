package io.kafkaaudit.interceptor;

import com.dynatrace.hash4j.hashing.HashStream64;
import com.dynatrace.hash4j.hashing.Hasher64;
import com.dynatrace.hash4j.hashing.Hashing;

/**
 * The pinned 64-bit hash of one message ({@code docs/audit-message-v1.md}, Checksum):
 * {@code xxh3_64(le_u32(len(key)) ‖ key ‖ value)}, seed 0; an absent key hashes like an
 * empty one. A window's checksum is the wrapping sum of these.
 */
final class MessageHash {
  private MessageHash() {}

  private static final Hasher64 XXH3 = Hashing.xxh3_64();
  /** Small messages are hashed in one call from a per-thread copy (cheaper than a stream). */
  private static final int COPY_LIMIT = 1024;

  private static final ThreadLocal<byte[]> BUFFER = ThreadLocal.withInitial(() -> new byte[COPY_LIMIT]);
  private static final ThreadLocal<HashStream64> STREAM = ThreadLocal.withInitial(XXH3::hashStream);

  static long of(byte[] key, byte[] value) {
    int klen = key == null ? 0 : key.length;
    int vlen = value == null ? 0 : value.length;
    int total = 4 + klen + vlen;
    if (total <= COPY_LIMIT) {
      byte[] b = BUFFER.get();
      b[0] = (byte) klen;
      b[1] = (byte) (klen >>> 8);
      b[2] = (byte) (klen >>> 16);
      b[3] = (byte) (klen >>> 24);
      if (klen > 0) {
        System.arraycopy(key, 0, b, 4, klen);
      }
      if (vlen > 0) {
        System.arraycopy(value, 0, b, 4 + klen, vlen);
      }
      return XXH3.hashBytesToLong(b, 0, total);
    }
    HashStream64 s = STREAM.get().reset();
    s.putByte((byte) klen).putByte((byte) (klen >>> 8)).putByte((byte) (klen >>> 16)).putByte((byte) (klen >>> 24));
    if (klen > 0) {
      s.putBytes(key);
    }
    if (vlen > 0) {
      s.putBytes(value);
    }
    return s.getAsLong();
  }
}
