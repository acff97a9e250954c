package io.kafkaaudit.interceptor;

/** Rust's {@code str} behaviour where the algorithm depends on it. */
final class RustStr {
  private RustStr() {}

  /** Rust's {@code char::is_whitespace}: the Unicode White_Space property. */
  static boolean isWhitespace(int c) {
    return (c >= 0x09 && c <= 0x0D)
        || c == 0x20
        || c == 0x85
        || c == 0xA0
        || c == 0x1680
        || (c >= 0x2000 && c <= 0x200A)
        || c == 0x2028
        || c == 0x2029
        || c == 0x202F
        || c == 0x205F
        || c == 0x3000;
  }

  /** Rust's {@code str::trim}: White_Space removed at both ends. */
  static String trim(String s) {
    int from = 0;
    int to = s.length();
    while (from < to && isWhitespace(s.codePointAt(from))) {
      from += Character.charCount(s.codePointAt(from));
    }
    while (to > from && isWhitespace(s.codePointBefore(to))) {
      to -= Character.charCount(s.codePointBefore(to));
    }
    return s.substring(from, to);
  }
}
