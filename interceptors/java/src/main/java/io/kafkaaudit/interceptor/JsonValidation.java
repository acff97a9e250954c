package io.kafkaaudit.interceptor;

/**
 * Whether a whole document is JSON, as serde_json decides when it reads a value it
 * ignores ({@code IgnoredAny}): the strict grammar, no nesting limit, strings without
 * raw control characters and with well-formed escapes (their code points and the
 * UTF-8 of their bytes are not checked). The scanner asks this only of documents whose
 * top level is not an object.
 */
final class JsonValidation {
  private JsonValidation() {}

  static boolean isValid(byte[] b) {
    int[] at = {0};
    if (!value(b, at)) {
      return false;
    }
    int i = skipWs(b, at[0]);
    return i == b.length;
  }

  private static int skipWs(byte[] b, int i) {
    while (i < b.length && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) {
      i++;
    }
    return i;
  }

  /** One value from {@code at[0]}, iteratively (a stack of open brackets, any depth). */
  private static boolean value(byte[] b, int[] at) {
    java.util.ArrayDeque<Byte> open = new java.util.ArrayDeque<>();
    int i = at[0];
    while (true) {
      i = skipWs(b, i);
      if (i >= b.length) {
        return false;
      }
      byte c = b[i];
      boolean opened = false;
      if (c == '{' || c == '[') {
        open.push(c);
        i++;
        opened = true;
      } else if (c == '"') {
        i = string(b, i + 1);
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        i = number(b, i);
      } else if (c == 't') {
        i = literal(b, i, "true");
      } else if (c == 'f') {
        i = literal(b, i, "false");
      } else if (c == 'n') {
        i = literal(b, i, "null");
      } else {
        return false;
      }
      if (i < 0) {
        return false;
      }
      // After a value (or an opening bracket): close, separate, or expect a member.
      boolean acceptComma = !opened;
      while (true) {
        if (open.isEmpty()) {
          at[0] = i;
          return true;
        }
        byte frame = open.peek();
        i = skipWs(b, i);
        if (i >= b.length) {
          return false;
        }
        byte d = b[i];
        if (d == ',' && acceptComma) {
          i++;
          break;
        }
        if ((d == ']' && frame == '[') || (d == '}' && frame == '{')) {
          i++;
          open.pop();
          acceptComma = true;
          continue;
        }
        if (acceptComma) {
          return false;
        }
        break;
      }
      if (!open.isEmpty() && open.peek() == '{') {
        i = skipWs(b, i);
        if (i >= b.length || b[i] != '"') {
          return false;
        }
        i = string(b, i + 1);
        if (i < 0) {
          return false;
        }
        i = skipWs(b, i);
        if (i >= b.length || b[i] != ':') {
          return false;
        }
        i++;
      }
    }
  }

  /** From after the opening quote: the index after the closing one, or -1. */
  private static int string(byte[] b, int i) {
    while (i < b.length) {
      int c = b[i] & 0xff;
      if (c == '"') {
        return i + 1;
      }
      if (c < 0x20) {
        return -1;
      }
      if (c == '\\') {
        if (i + 1 >= b.length) {
          return -1;
        }
        int e = b[i + 1];
        if (e == 'u') {
          if (i + 6 > b.length) {
            return -1;
          }
          for (int k = i + 2; k < i + 6; k++) {
            if (Character.digit(b[k] & 0x7f, 16) < 0 || b[k] < 0) {
              return -1;
            }
          }
          i += 6;
        } else if ("\"\\/bfnrt".indexOf(e) >= 0) {
          i += 2;
        } else {
          return -1;
        }
        continue;
      }
      i++;
    }
    return -1;
  }

  /** The scanner's strict number grammar (a number byte right after a number is invalid JSON anyway). */
  private static int number(byte[] b, int i) {
    int len = JsonScan.numberLen(b, i, b.length);
    return len < 0 ? -1 : i + len;
  }

  private static int literal(byte[] b, int i, String lit) {
    if (b.length - i < lit.length()) {
      return -1;
    }
    for (int k = 0; k < lit.length(); k++) {
      if (b[i + k] != lit.charAt(k)) {
        return -1;
      }
    }
    return i + lit.length();
  }
}
