package io.kafkaaudit.interceptor;

/** UTF-8 validity exactly as Rust's {@code str::from_utf8} decides it. */
final class Utf8 {
  private Utf8() {}

  static boolean isValid(byte[] b, int from, int to) {
    int i = from;
    while (i < to) {
      int c = b[i] & 0xff;
      if (c < 0x80) {
        i++;
        continue;
      }
      int n;
      int lo = 0x80;
      int hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) {
        n = 1;
      } else if (c >= 0xE0 && c <= 0xEF) {
        n = 2;
        if (c == 0xE0) {
          lo = 0xA0; // no overlong forms
        } else if (c == 0xED) {
          hi = 0x9F; // no surrogates
        }
      } else if (c >= 0xF0 && c <= 0xF4) {
        n = 3;
        if (c == 0xF0) {
          lo = 0x90;
        } else if (c == 0xF4) {
          hi = 0x8F; // nothing above U+10FFFF
        }
      } else {
        return false;
      }
      if (i + n >= to) {
        return false; // truncated
      }
      int second = b[i + 1] & 0xff;
      if (second < lo || second > hi) {
        return false;
      }
      for (int k = 2; k <= n; k++) {
        int cont = b[i + k] & 0xff;
        if (cont < 0x80 || cont > 0xBF) {
          return false;
        }
      }
      i += n + 1;
    }
    return true;
  }
}
