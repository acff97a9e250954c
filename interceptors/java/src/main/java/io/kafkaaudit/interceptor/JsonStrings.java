package io.kafkaaudit.interceptor;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/**
 * JSON string contents as serde_json reads them into a Rust {@code String}: escapes
 * strict, surrogate escapes paired, no raw control characters, valid UTF-8. Both
 * methods take the bytes between the quotes and return null where serde_json fails.
 */
final class JsonStrings {
  private JsonStrings() {}

  /** Contents without backslashes: only control characters and UTF-8 to check. */
  static String plain(byte[] b, int from, int to) {
    for (int i = from; i < to; i++) {
      if ((b[i] & 0xff) < 0x20) {
        return null;
      }
    }
    if (!Utf8.isValid(b, from, to)) {
      return null;
    }
    return new String(b, from, to - from, StandardCharsets.UTF_8);
  }

  /** Contents with escapes. */
  static String decode(byte[] b, int from, int to) {
    ByteArrayOutputStream out = new ByteArrayOutputStream(to - from);
    int i = from;
    while (i < to) {
      int c = b[i] & 0xff;
      if (c < 0x20) {
        return null;
      }
      if (c != '\\') {
        out.write(c);
        i++;
        continue;
      }
      i++;
      if (i >= to) {
        return null;
      }
      int e = b[i++] & 0xff;
      switch (e) {
        case '"':
          out.write('"');
          break;
        case '\\':
          out.write('\\');
          break;
        case '/':
          out.write('/');
          break;
        case 'b':
          out.write(8);
          break;
        case 'f':
          out.write(12);
          break;
        case 'n':
          out.write('\n');
          break;
        case 'r':
          out.write('\r');
          break;
        case 't':
          out.write('\t');
          break;
        case 'u':
          {
            int n = hex4(b, i, to);
            if (n < 0) {
              return null;
            }
            i += 4;
            if (n >= 0xDC00 && n <= 0xDFFF) {
              return null; // a trailing surrogate first
            }
            if (n >= 0xD800 && n <= 0xDBFF) {
              // A leading surrogate must be followed by an escaped trailing one.
              if (i + 1 >= to || b[i] != '\\' || b[i + 1] != 'u') {
                return null;
              }
              int n2 = hex4(b, i + 2, to);
              if (n2 < 0xDC00 || n2 > 0xDFFF) {
                return null;
              }
              i += 6;
              codePoint(out, (((n - 0xD800) << 10) | (n2 - 0xDC00)) + 0x10000);
            } else {
              codePoint(out, n);
            }
            break;
          }
        default:
          return null;
      }
    }
    byte[] bytes = out.toByteArray();
    if (!Utf8.isValid(bytes, 0, bytes.length)) {
      return null;
    }
    return new String(bytes, StandardCharsets.UTF_8);
  }

  /** Four hex digits at {@code i}, or -1. */
  private static int hex4(byte[] b, int i, int to) {
    if (i + 4 > to) {
      return -1;
    }
    int v = 0;
    for (int k = 0; k < 4; k++) {
      int c = b[i + k];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return -1;
      }
      v = v * 16 + d;
    }
    return v;
  }

  private static void codePoint(ByteArrayOutputStream out, int n) {
    byte[] s = new String(Character.toChars(n)).getBytes(StandardCharsets.UTF_8);
    out.write(s, 0, s.length);
  }
}
