package io.kafkaaudit.interceptor;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small TOML 1.0 reader for the event-time file: tables, arrays of tables, dotted
 * and quoted keys, strings of all four kinds, integers, booleans, arrays and inline
 * tables, comments. Floats and dates are read as {@link Unsupported} values, which the
 * event-time schema rejects as it rejects any value of the wrong type. A table defined
 * twice or a key given twice is an error, as in the toml crate.
 */
final class Toml {
  /** A value of a type the event-time schema has no use for (float, date-time). */
  static final class Unsupported {
    final String what;

    Unsupported(String what) {
      this.what = what;
    }
  }

  static final class ParseError extends Exception {
    private static final long serialVersionUID = 1L;

    ParseError(String message) {
      super(message);
    }
  }

  private final String s;
  private int i;
  private int line = 1;

  private Toml(String s) {
    this.s = s;
  }

  /** The document as nested maps (insertion-ordered), lists, strings, longs, booleans. */
  static Map<String, Object> parse(String text) throws ParseError {
    return new Toml(text).document();
  }

  private ParseError error(String what) {
    return new ParseError("TOML line " + line + ": " + what);
  }

  /** Tables defined by a header (so a second [x] is an error). */
  private final java.util.Set<Map<String, Object>> defined =
      java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
  /** Inline tables and arrays are sealed: no header or dotted key may extend them. */
  private final java.util.Set<Object> sealed =
      java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());

  private Map<String, Object> document() throws ParseError {
    Map<String, Object> root = new LinkedHashMap<>();
    Map<String, Object> current = root;
    while (true) {
      skipBlank();
      if (i >= s.length()) {
        return root;
      }
      char c = s.charAt(i);
      if (c == '[') {
        boolean array = s.startsWith("[[", i);
        i += array ? 2 : 1;
        skipSpaces();
        List<String> key = key();
        skipSpaces();
        if (!s.startsWith(array ? "]]" : "]", i)) {
          throw error("expected " + (array ? "]]" : "]") + " after the table name");
        }
        i += array ? 2 : 1;
        endOfLine();
        current = array ? arrayTable(root, key) : table(root, key);
      } else {
        List<String> key = key();
        skipSpaces();
        if (i >= s.length() || s.charAt(i) != '=') {
          throw error("expected = after a key");
        }
        i++;
        skipSpaces();
        Object v = value();
        put(current, key, v);
        endOfLine();
      }
    }
  }

  @SuppressWarnings("unchecked")
  private Map<String, Object> descend(Map<String, Object> at, String k) throws ParseError {
    Object o = at.get(k);
    if (o == null) {
      Map<String, Object> t = new LinkedHashMap<>();
      at.put(k, t);
      return t;
    }
    if (o instanceof Map && !sealed.contains(o)) {
      return (Map<String, Object>) o;
    }
    if (o instanceof List && !sealed.contains(o)) {
      List<Object> l = (List<Object>) o;
      return (Map<String, Object>) l.get(l.size() - 1);
    }
    throw error("key `" + k + "` is already defined");
  }

  private Map<String, Object> table(Map<String, Object> root, List<String> key) throws ParseError {
    Map<String, Object> at = root;
    for (String k : key) {
      at = descend(at, k);
    }
    if (!defined.add(at)) {
      throw error("table [" + String.join(".", key) + "] is defined twice");
    }
    return at;
  }

  @SuppressWarnings("unchecked")
  private Map<String, Object> arrayTable(Map<String, Object> root, List<String> key) throws ParseError {
    Map<String, Object> at = root;
    for (int k = 0; k < key.size() - 1; k++) {
      at = descend(at, key.get(k));
    }
    String last = key.get(key.size() - 1);
    Object o = at.get(last);
    List<Object> list;
    if (o == null) {
      list = new ArrayList<>();
      at.put(last, list);
    } else if (o instanceof List && !sealed.contains(o)) {
      list = (List<Object>) o;
    } else {
      throw error("key `" + last + "` is already defined");
    }
    Map<String, Object> t = new LinkedHashMap<>();
    list.add(t);
    defined.add(t);
    return t;
  }

  private void put(Map<String, Object> at, List<String> key, Object v) throws ParseError {
    for (int k = 0; k < key.size() - 1; k++) {
      Object o = at.get(key.get(k));
      if (o != null && defined.contains(o)) {
        throw error("key `" + key.get(k) + "` is already defined");
      }
      at = descend(at, key.get(k));
    }
    String last = key.get(key.size() - 1);
    if (at.containsKey(last)) {
      throw error("duplicate key `" + last + "`");
    }
    at.put(last, v);
  }

  private List<String> key() throws ParseError {
    List<String> parts = new ArrayList<>();
    while (true) {
      skipSpaces();
      if (i >= s.length()) {
        throw error("expected a key");
      }
      char c = s.charAt(i);
      if (c == '"') {
        if (s.startsWith("\"\"\"", i)) {
          throw error("a key cannot be a multi-line string");
        }
        i++;
        parts.add(basicString());
      } else if (c == '\'') {
        if (s.startsWith("'''", i)) {
          throw error("a key cannot be a multi-line string");
        }
        i++;
        parts.add(literalString());
      } else {
        int start = i;
        while (i < s.length() && isBare(s.charAt(i))) {
          i++;
        }
        if (i == start) {
          throw error("expected a key");
        }
        parts.add(s.substring(start, i));
      }
      skipSpaces();
      if (i < s.length() && s.charAt(i) == '.') {
        i++;
        continue;
      }
      return parts;
    }
  }

  private static boolean isBare(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  private Object value() throws ParseError {
    if (i >= s.length()) {
      throw error("expected a value");
    }
    char c = s.charAt(i);
    if (s.startsWith("\"\"\"", i)) {
      i += 3;
      return multilineBasic();
    }
    if (s.startsWith("'''", i)) {
      i += 3;
      return multilineLiteral();
    }
    if (c == '"') {
      i++;
      return basicString();
    }
    if (c == '\'') {
      i++;
      return literalString();
    }
    if (c == '[') {
      i++;
      List<Object> list = new ArrayList<>();
      while (true) {
        skipBlank();
        if (i < s.length() && s.charAt(i) == ']') {
          i++;
          sealed.add(list);
          return list;
        }
        list.add(value());
        skipBlank();
        if (i < s.length() && s.charAt(i) == ',') {
          i++;
          continue;
        }
        skipBlank();
        if (i < s.length() && s.charAt(i) == ']') {
          i++;
          sealed.add(list);
          return list;
        }
        throw error("expected , or ] in an array");
      }
    }
    if (c == '{') {
      i++;
      Map<String, Object> t = new LinkedHashMap<>();
      skipSpaces();
      if (i < s.length() && s.charAt(i) == '}') {
        i++;
        sealed.add(t);
        return t;
      }
      while (true) {
        List<String> key = key();
        skipSpaces();
        if (i >= s.length() || s.charAt(i) != '=') {
          throw error("expected = in an inline table");
        }
        i++;
        skipSpaces();
        put(t, key, value());
        skipSpaces();
        if (i < s.length() && s.charAt(i) == ',') {
          i++;
          continue;
        }
        if (i < s.length() && s.charAt(i) == '}') {
          i++;
          sealed.add(t);
          return t;
        }
        throw error("expected , or } in an inline table");
      }
    }
    if (s.startsWith("true", i) && !bareAfter(i + 4)) {
      i += 4;
      return Boolean.TRUE;
    }
    if (s.startsWith("false", i) && !bareAfter(i + 5)) {
      i += 5;
      return Boolean.FALSE;
    }
    int start = i;
    while (i < s.length() && !isValueEnd(s.charAt(i))) {
      i++;
    }
    String word = s.substring(start, i);
    if (word.isEmpty()) {
      throw error("expected a value");
    }
    if (word.matches("[+-]?(0|[1-9](_?[0-9])*)")) {
      try {
        return Long.parseLong(word.replace("_", "").replace("+", ""));
      } catch (NumberFormatException e) {
        throw error("integer out of range: " + word);
      }
    }
    if (word.matches("0x[0-9A-Fa-f](_?[0-9A-Fa-f])*|0o[0-7](_?[0-7])*|0b[01](_?[01])*")) {
      try {
        return Long.parseLong(word.substring(2).replace("_", ""), word.charAt(1) == 'x' ? 16 : word.charAt(1) == 'o' ? 8 : 2);
      } catch (NumberFormatException e) {
        throw error("integer out of range: " + word);
      }
    }
    if (word.matches("[+-]?(0|[1-9](_?[0-9])*)(\\.[0-9](_?[0-9])*)?([eE][+-]?[0-9](_?[0-9])*)?|[+-]?(inf|nan)")) {
      return new Unsupported("floating point " + word);
    }
    if (word.matches("[0-9]{4}-[0-9]{2}-[0-9]{2}.*|[0-9]{2}:[0-9]{2}:[0-9]{2}.*")) {
      return new Unsupported("date-time " + word);
    }
    throw error("invalid value `" + word + "`");
  }

  private boolean bareAfter(int at) {
    return at < s.length() && !isValueEnd(s.charAt(at));
  }

  private static boolean isValueEnd(char c) {
    return c == ',' || c == ']' || c == '}' || c == '#' || c == '\n' || c == '\r' || c == ' ' || c == '\t';
  }

  private String basicString() throws ParseError {
    StringBuilder out = new StringBuilder();
    while (true) {
      if (i >= s.length() || s.charAt(i) == '\n') {
        throw error("unterminated string");
      }
      char c = s.charAt(i++);
      if (c == '"') {
        return out.toString();
      }
      if (c == '\\') {
        escape(out);
      } else if (c < 0x20 && c != '\t' || c == 0x7f) {
        throw error("control character in a string");
      } else {
        out.append(c);
      }
    }
  }

  private void escape(StringBuilder out) throws ParseError {
    if (i >= s.length()) {
      throw error("unterminated escape");
    }
    char e = s.charAt(i++);
    switch (e) {
      case 'b':
        out.append('\b');
        return;
      case 't':
        out.append('\t');
        return;
      case 'n':
        out.append('\n');
        return;
      case 'f':
        out.append('\f');
        return;
      case 'r':
        out.append('\r');
        return;
      case '"':
        out.append('"');
        return;
      case '\\':
        out.append('\\');
        return;
      case 'u':
      case 'U':
        {
          int n = e == 'u' ? 4 : 8;
          if (i + n > s.length()) {
            throw error("short unicode escape");
          }
          String hex = s.substring(i, i + n);
          if (!hex.matches("[0-9A-Fa-f]+")) {
            throw error("invalid unicode escape \\" + e + hex);
          }
          long cp = Long.parseLong(hex, 16);
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            throw error("invalid unicode escape \\" + e + hex);
          }
          out.appendCodePoint((int) cp);
          i += n;
          return;
        }
      default:
        throw error("invalid escape \\" + e);
    }
  }

  private String literalString() throws ParseError {
    int start = i;
    while (i < s.length() && s.charAt(i) != '\'') {
      char c = s.charAt(i);
      if (c == '\n' || (c < 0x20 && c != '\t') || c == 0x7f) {
        throw error("unterminated or invalid literal string");
      }
      i++;
    }
    if (i >= s.length()) {
      throw error("unterminated literal string");
    }
    return s.substring(start, i++);
  }

  private String multilineBasic() throws ParseError {
    StringBuilder out = new StringBuilder();
    if (s.startsWith("\n", i)) {
      i++;
    } else if (s.startsWith("\r\n", i)) {
      i += 2;
    }
    while (true) {
      if (i >= s.length()) {
        throw error("unterminated multi-line string");
      }
      if (s.startsWith("\"\"\"", i)) {
        // Up to two more quotes belong to the string.
        int q = 3;
        while (q < 5 && s.startsWith("\"", i + q)) {
          q++;
        }
        out.append("\"".repeat(q - 3));
        i += q;
        return out.toString();
      }
      char c = s.charAt(i++);
      if (c == '\\') {
        // A line-ending backslash trims the newline and the whitespace after it.
        int j = i;
        while (j < s.length() && (s.charAt(j) == ' ' || s.charAt(j) == '\t')) {
          j++;
        }
        if (j < s.length() && (s.charAt(j) == '\n' || s.startsWith("\r\n", j))) {
          i = j;
          while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
            if (s.charAt(i) == '\n') {
              line++;
            }
            i++;
          }
        } else {
          escape(out);
        }
      } else {
        if (c == '\n') {
          line++;
        } else if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
          throw error("control character in a string");
        }
        out.append(c);
      }
    }
  }

  private String multilineLiteral() throws ParseError {
    if (s.startsWith("\n", i)) {
      i++;
    } else if (s.startsWith("\r\n", i)) {
      i += 2;
    }
    int end = s.indexOf("'''", i);
    if (end < 0) {
      throw error("unterminated multi-line literal string");
    }
    // Up to two more quotes belong to the string.
    int extra = 0;
    while (extra < 2 && s.startsWith("'", end + 3 + extra)) {
      extra++;
    }
    end += extra;
    String out = s.substring(i, end);
    for (char c : out.toCharArray()) {
      if (c == '\n') {
        line++;
      }
    }
    i = end + 3;
    return out;
  }

  private void skipSpaces() {
    while (i < s.length() && (s.charAt(i) == ' ' || s.charAt(i) == '\t')) {
      i++;
    }
  }

  /** Spaces, newlines and comments. */
  private void skipBlank() throws ParseError {
    while (i < s.length()) {
      char c = s.charAt(i);
      if (c == ' ' || c == '\t' || c == '\r') {
        i++;
      } else if (c == '\n') {
        line++;
        i++;
      } else if (c == '#') {
        comment();
      } else {
        return;
      }
    }
  }

  private void comment() throws ParseError {
    while (i < s.length() && s.charAt(i) != '\n') {
      char c = s.charAt(i);
      if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
        throw error("control character in a comment");
      }
      i++;
    }
  }

  /** After a key/value or a table header: only spaces and a comment until the newline. */
  private void endOfLine() throws ParseError {
    skipSpaces();
    if (i < s.length() && s.charAt(i) == '#') {
      comment();
    }
    if (s.startsWith("\r\n", i)) {
      i += 2;
      line++;
    } else if (i < s.length() && s.charAt(i) == '\n') {
      i++;
      line++;
    } else if (i < s.length()) {
      throw error("expected a newline after a value, found `" + s.charAt(i) + "`");
    }
  }
}
