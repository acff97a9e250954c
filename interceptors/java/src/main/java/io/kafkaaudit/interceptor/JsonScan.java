package io.kafkaaudit.interceptor;

/**
 * The targeted JSON field scanner of audit-lib ({@code audit-lib/src/scan.rs}): finds
 * one value by path without building a document, with the same answer on every input,
 * malformed ones included (the conformance vectors hold it to that). Its rules, as
 * {@code docs/event-time.md} states them: the first occurrence of a key at each level;
 * keys compared after unescaping; scanning stops at the value, so bytes after it are
 * not checked, and skipped values are checked for structure only; a top-level value
 * that is not an object has no fields if it is valid JSON.
 */
final class JsonScan {
  private JsonScan() {}

  /** What the scanner found. */
  enum Kind {
    ABSENT,
    NULL,
    BOOL,
    /** A plain integer of at most 18 digits, in {@link Found#integer}. */
    INT,
    /** Any other number, its text in {@link Found#text}. */
    NUMBER,
    STRING,
    COMPOUND,
    /** The document is not JSON where the scanner had to read it. */
    ERROR
  }

  /** The scanner's answer; {@code text} holds a NUMBER's text or a STRING's value. */
  static final class Found {
    final Kind kind;
    final long integer;
    final boolean bool;
    final String text;

    private Found(Kind kind, long integer, boolean bool, String text) {
      this.kind = kind;
      this.integer = integer;
      this.bool = bool;
      this.text = text;
    }

    static final Found ABSENT = new Found(Kind.ABSENT, 0, false, null);
    static final Found NULL = new Found(Kind.NULL, 0, false, null);
    static final Found TRUE = new Found(Kind.BOOL, 0, true, null);
    static final Found FALSE = new Found(Kind.BOOL, 0, false, null);
    static final Found COMPOUND = new Found(Kind.COMPOUND, 0, false, null);
    static final Found ERROR = new Found(Kind.ERROR, 0, false, null);

    static Found integer(long v) {
      return new Found(Kind.INT, v, false, null);
    }

    static Found number(String text) {
      return new Found(Kind.NUMBER, 0, false, text);
    }

    static Found string(String s) {
      return new Found(Kind.STRING, 0, false, s);
    }
  }

  /** Thrown (without a stack trace: it is control flow) where the document is not JSON. */
  static final class Malformed extends Exception {
    private static final long serialVersionUID = 1L;
    static final Malformed INSTANCE = new Malformed();

    private Malformed() {
      super("invalid JSON", null, false, false);
    }
  }

  private static boolean isWs(int b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
  }

  /** The value at {@code path} (UTF-8 segments of a dotted path) in {@code doc}. */
  static Found findPath(byte[] doc, byte[][] path) {
    try {
      if (path.length == 1) {
        // The commonest layout, a compact object whose first key is the field: the
        // same shortcut as audit-lib's, which compares the raw key bytes.
        byte[] name = path[0];
        int n = name.length;
        if (doc.length > n + 4
            && doc[0] == '{'
            && doc[1] == '"'
            && doc[n + 2] == '"'
            && doc[n + 3] == ':'
            && regionEquals(doc, 2, name)) {
          Cursor c = new Cursor(doc, n + 4);
          c.skipWs();
          return c.readTarget();
        }
      }
      return findPathGeneral(doc, path);
    } catch (Malformed e) {
      return Found.ERROR;
    }
  }

  private static boolean regionEquals(byte[] doc, int at, byte[] name) {
    for (int i = 0; i < name.length; i++) {
      if (doc[at + i] != name[i]) {
        return false;
      }
    }
    return true;
  }

  private static Found findPathGeneral(byte[] doc, byte[][] path) throws Malformed {
    Cursor c = new Cursor(doc, 0);
    c.skipWs();
    int first = c.peek();
    if (first < 0) {
      throw Malformed.INSTANCE;
    }
    if (first != '{') {
      // Valid JSON that is not an object has no fields.
      if (JsonValidation.isValid(doc)) {
        return Found.ABSENT;
      }
      throw Malformed.INSTANCE;
    }
    if (path.length == 0) {
      return Found.ABSENT;
    }
    for (int s = 0; s < path.length - 1; s++) {
      if (!findMember(c, path[s])) {
        return Found.ABSENT;
      }
      // The first occurrence only; one that is not an object means absent, if it is
      // a well-formed value.
      if (c.peek() != '{') {
        c.readTarget();
        return Found.ABSENT;
      }
    }
    if (findMember(c, path[path.length - 1])) {
      return c.readTarget();
    }
    return Found.ABSENT;
  }

  /** With the cursor on '{': to the value of the first member {@code name}, or past the object. */
  private static boolean findMember(Cursor c, byte[] name) throws Malformed {
    c.i++;
    c.skipWs();
    if (c.peek() == '}') {
      c.i++;
      return false;
    }
    byte[] b = c.b;
    while (true) {
      if (c.peek() != '"') {
        throw Malformed.INSTANCE;
      }
      int keyStart = c.i;
      c.i++;
      int keyEnd = c.stringEnd();
      boolean matched;
      if (c.lastEscaped) {
        String key = JsonStrings.decode(b, keyStart + 1, keyEnd);
        if (key == null) {
          throw Malformed.INSTANCE;
        }
        matched = java.util.Arrays.equals(key.getBytes(java.nio.charset.StandardCharsets.UTF_8), name);
      } else {
        int len = keyEnd - keyStart - 1;
        matched = len == name.length && regionEquals(b, keyStart + 1, name);
      }
      c.skipWs();
      if (c.peek() != ':') {
        throw Malformed.INSTANCE;
      }
      c.i++;
      c.skipWs();
      if (matched) {
        return true;
      }
      c.skipValue();
      if (!c.memberSeparator()) {
        return false;
      }
      c.skipWs();
    }
  }

  /**
   * Length of the JSON number at {@code from}, strictly per the grammar, or -1. A number
   * directly followed by another number character is not one.
   */
  static int numberLen(byte[] b, int from, int to) {
    int i = from;
    if (i < to && b[i] == '-') {
      i++;
    }
    if (i < to && b[i] == '0') {
      i++;
    } else if (i < to && b[i] >= '1' && b[i] <= '9') {
      while (i < to && isDigit(b[i])) {
        i++;
      }
    } else {
      return -1;
    }
    if (i < to && b[i] == '.') {
      i++;
      int s = i;
      while (i < to && isDigit(b[i])) {
        i++;
      }
      if (i == s) {
        return -1;
      }
    }
    if (i < to && (b[i] == 'e' || b[i] == 'E')) {
      i++;
      if (i < to && (b[i] == '+' || b[i] == '-')) {
        i++;
      }
      int s = i;
      while (i < to && isDigit(b[i])) {
        i++;
      }
      if (i == s) {
        return -1;
      }
    }
    if (i < to && isNumberByte(b[i])) {
      return -1;
    }
    return i - from;
  }

  private static boolean isDigit(byte c) {
    return c >= '0' && c <= '9';
  }

  private static boolean isNumberByte(byte c) {
    return isDigit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
  }

  private static final class Cursor {
    final byte[] b;
    int i;
    /** Whether the string {@link #stringEnd} last found contains a backslash. */
    boolean lastEscaped;

    Cursor(byte[] b, int i) {
      this.b = b;
      this.i = i;
    }

    void skipWs() {
      while (i < b.length && isWs(b[i])) {
        i++;
      }
    }

    int peek() {
      return i < b.length ? b[i] & 0xff : -1;
    }

    /** With {@code i} after an opening quote: the index of the closing quote. */
    int stringEnd() throws Malformed {
      lastEscaped = false;
      int j = i;
      while (j < b.length) {
        byte c = b[j];
        if (c == '"') {
          i = j + 1;
          return j;
        }
        if (c == '\\') {
          lastEscaped = true;
          j += 2;
        } else {
          j++;
        }
      }
      throw Malformed.INSTANCE;
    }

    /** Skips one value of any type, checking its structure only. */
    void skipValue() throws Malformed {
      int c = peek();
      switch (c) {
        case '"':
          i++;
          stringEnd();
          return;
        case '{':
        case '[':
          skipCompound();
          return;
        case 't':
          literal("true");
          return;
        case 'f':
          literal("false");
          return;
        case 'n':
          literal("null");
          return;
        default:
          if (c == '-' || (c >= '0' && c <= '9')) {
            int start = i;
            while (i < b.length && isNumberByte(b[i])) {
              i++;
            }
            if (i == start + 1 && b[start] == '-') {
              throw Malformed.INSTANCE;
            }
            return;
          }
          throw Malformed.INSTANCE;
      }
    }

    void literal(String lit) throws Malformed {
      if (b.length - i < lit.length()) {
        throw Malformed.INSTANCE;
      }
      for (int k = 0; k < lit.length(); k++) {
        if (b[i + k] != lit.charAt(k)) {
          throw Malformed.INSTANCE;
        }
      }
      i += lit.length();
    }

    /**
     * Skips a nested object or array. As audit-lib's block scanner does, only the
     * compound's own bracket pair is counted, outside strings; a backslash escapes the
     * byte after it wherever it stands (so an escaped quote never opens or closes a
     * string). On valid JSON that is the compound's end; on invalid JSON it is the same
     * answer audit-lib gives.
     */
    void skipCompound() throws Malformed {
      byte open = b[i];
      byte close = (byte) (open + 2);
      int depth = 0;
      boolean inString = false;
      boolean escapeNext = false;
      for (int k = i; k < b.length; k++) {
        byte c = b[k];
        boolean escaped = escapeNext;
        escapeNext = c == '\\' && !escaped;
        if (c == '"' && !escaped) {
          inString = !inString;
        } else if (!inString) {
          if (c == open) {
            depth++;
          } else if (c == close) {
            depth--;
            if (depth == 0) {
              i = k + 1;
              return;
            }
          }
        }
      }
      throw Malformed.INSTANCE;
    }

    /** After a value inside an object: ',' (more members) is true, '}' false. */
    boolean memberSeparator() throws Malformed {
      skipWs();
      int c = peek();
      if (c == ',') {
        i++;
        return true;
      }
      if (c == '}') {
        i++;
        return false;
      }
      throw Malformed.INSTANCE;
    }

    /** Reads the target value strictly, and checks what follows it. */
    Found readTarget() throws Malformed {
      int start = i;
      int c = peek();
      Found v;
      if (c == '"') {
        i++;
        int end = stringEnd();
        String s;
        if (lastEscaped) {
          s = JsonStrings.decode(b, start + 1, end);
        } else {
          s = JsonStrings.plain(b, start + 1, end);
        }
        if (s == null) {
          throw Malformed.INSTANCE;
        }
        v = Found.string(s);
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        boolean neg = c == '-';
        int ds = start + (neg ? 1 : 0);
        int k = ds;
        while (k < b.length && isDigit(b[k])) {
          k++;
        }
        int nd = k - ds;
        boolean plain =
            nd >= 1
                && nd <= 18
                && !(nd > 1 && b[ds] == '0')
                && (k == b.length || !isNumberByte(b[k]));
        if (plain) {
          long x = 0;
          for (int j = ds; j < k; j++) {
            x = x * 10 + (b[j] - '0');
          }
          i = k;
          memberSeparator();
          return Found.integer(neg ? -x : x);
        }
        int len = numberLen(b, start, b.length);
        if (len < 0) {
          throw Malformed.INSTANCE;
        }
        i = start + len;
        v = Found.number(new String(b, start, len, java.nio.charset.StandardCharsets.US_ASCII));
      } else if (c == 't') {
        literal("true");
        v = Found.TRUE;
      } else if (c == 'f') {
        literal("false");
        v = Found.FALSE;
      } else if (c == 'n') {
        literal("null");
        v = Found.NULL;
      } else if (c == '{' || c == '[') {
        skipCompound();
        v = Found.COMPOUND;
      } else {
        throw Malformed.INSTANCE;
      }
      memberSeparator();
      return v;
    }
  }
}
