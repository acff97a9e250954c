package io.kafkaaudit.interceptor;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * A topic glob as audit-lib compiles it (globset, {@code literal_separator(false)}):
 * {@code *} and {@code ?} match any characters, {@code [...]} a class ({@code !} or
 * {@code ^} negates, POSIX classes like {@code [:digit:]}), {@code {a,b}} alternatives
 * (nested), {@code \} escapes. The same parser, turned into the same regex.
 */
final class TopicGlob {
  final String pattern;
  private final Pattern regex;

  private TopicGlob(String pattern, Pattern regex) {
    this.pattern = pattern;
    this.regex = regex;
  }

  /**
   * globset's regex runs on bytes ({@code (?-u)}): matched here against the topic's
   * UTF-8 bytes, one char per byte.
   */
  boolean matches(String topic) {
    String bytes = new String(topic.getBytes(java.nio.charset.StandardCharsets.UTF_8), java.nio.charset.StandardCharsets.ISO_8859_1);
    return regex.matcher(bytes).matches();
  }

  static final class Invalid extends Exception {
    private static final long serialVersionUID = 1L;

    Invalid(String why) {
      super(why);
    }
  }

  // Tokens: a literal code point, or one of these.
  private static final int ANY = -1;
  private static final int ZERO_OR_MORE = -2;
  private static final int RECURSIVE_PREFIX = -3;
  private static final int RECURSIVE_SUFFIX = -4;
  private static final int RECURSIVE_ZERO_OR_MORE = -5;

  /** A token: a code point (>= 0), a wildcard (< 0), a class or alternatives. */
  private static final class Token {
    final int kind;
    final boolean negated;
    final List<int[]> ranges;
    final List<List<Token>> alternates;

    Token(int kind) {
      this(kind, false, null, null);
    }

    Token(int kind, boolean negated, List<int[]> ranges, List<List<Token>> alternates) {
      this.kind = kind;
      this.negated = negated;
      this.ranges = ranges;
      this.alternates = alternates;
    }

    static final int CLASS = Integer.MIN_VALUE;
    static final int ALTERNATES = Integer.MIN_VALUE + 1;

    boolean is(int k) {
      return kind == k && ranges == null && alternates == null;
    }
  }

  static TopicGlob compile(String pattern) throws Invalid {
    Parser p = new Parser(pattern);
    p.parse();
    if (p.branches.size() > 1) {
      throw new Invalid("unclosed alternates {");
    }
    List<Token> tokens = p.branches.get(0);
    StringBuilder re = new StringBuilder("^");
    if (tokens.size() == 1 && tokens.get(0).is(RECURSIVE_PREFIX)) {
      re.append(DOT).append('*');
    } else {
      toRegex(tokens, re);
    }
    re.append('$');
    return new TopicGlob(pattern, Pattern.compile(re.toString()));
  }

  private static void toRegex(List<Token> tokens, StringBuilder re) {
    for (Token t : tokens) {
      if (t.kind == Token.CLASS) {
        re.append('[');
        if (t.negated) {
          re.append('^');
        }
        for (int[] r : t.ranges) {
          literal(r[0], re);
          if (r[0] != r[1]) {
            re.append('-');
            literal(r[1], re);
          }
        }
        re.append(']');
      } else if (t.kind == Token.ALTERNATES) {
        List<String> parts = new ArrayList<>();
        for (List<Token> alt : t.alternates) {
          StringBuilder a = new StringBuilder();
          toRegex(alt, a);
          if (a.length() > 0) {
            parts.add(a.toString());
          }
        }
        if (!parts.isEmpty()) {
          re.append("(?:").append(String.join("|", parts)).append(')');
        }
      } else if (t.kind >= 0) {
        literal(t.kind, re);
      } else if (t.kind == ANY) {
        re.append(DOT);
      } else if (t.kind == ZERO_OR_MORE) {
        re.append(DOT).append('*');
      } else if (t.kind == RECURSIVE_PREFIX) {
        re.append("(?:/?|").append(DOT).append("*/)");
      } else if (t.kind == RECURSIVE_SUFFIX) {
        re.append('/').append(DOT).append('*');
      } else {
        re.append("(?:/|/").append(DOT).append("*/)");
      }
    }
  }

  /** A code point as its UTF-8 bytes, as globset writes literals for a byte regex. */
  private static void literal(int cp, StringBuilder re) {
    for (byte b : new String(Character.toChars(cp)).getBytes(java.nio.charset.StandardCharsets.UTF_8)) {
      re.append(String.format("\\x{%02x}", b & 0xff));
    }
  }

  /** A byte regex's {@code .}: any byte but a newline. */
  private static final String DOT = "[^\\n]";

  private static boolean isSeparator(int c) {
    return c == '/';
  }

  private static final class Parser {
    final int[] chars;
    int pos;
    int prev = -1;
    int cur = -1;
    final List<Integer> alternatesStack = new ArrayList<>();
    final List<List<Token>> branches = new ArrayList<>();

    Parser(String glob) {
      chars = glob.codePoints().toArray();
      branches.add(new ArrayList<>());
    }

    int bump() {
      prev = cur;
      cur = pos < chars.length ? chars[pos++] : -1;
      return cur;
    }

    int peek() {
      return pos < chars.length ? chars[pos] : -1;
    }

    void parse() throws Invalid {
      int c;
      while ((c = bump()) != -1) {
        switch (c) {
          case '?':
            push(new Token(ANY));
            break;
          case '*':
            star();
            break;
          case '[':
            classToken();
            break;
          case '{':
            if (alternatesStack.size() >= 100) {
              throw new Invalid("too many nested alternates");
            }
            alternatesStack.add(branches.size());
            branches.add(new ArrayList<>());
            break;
          case '}':
            {
              if (alternatesStack.isEmpty()) {
                throw new Invalid("unopened alternates }");
              }
              int start = alternatesStack.remove(alternatesStack.size() - 1);
              List<List<Token>> alts = new ArrayList<>(branches.subList(start, branches.size()));
              branches.subList(start, branches.size()).clear();
              push(new Token(Token.ALTERNATES, false, null, alts));
              break;
            }
          case ',':
            if (alternatesStack.isEmpty()) {
              push(new Token(','));
            } else {
              branches.add(new ArrayList<>());
            }
            break;
          case '\\':
            {
              int n = bump();
              if (n == -1) {
                throw new Invalid("dangling escape \\");
              }
              push(new Token(n));
              break;
            }
          default:
            push(new Token(c));
        }
      }
    }

    void push(Token t) throws Invalid {
      if (branches.isEmpty()) {
        throw new Invalid("unopened alternates");
      }
      branches.get(branches.size() - 1).add(t);
    }

    Token pop() {
      List<Token> last = branches.get(branches.size() - 1);
      return last.remove(last.size() - 1);
    }

    boolean haveTokens() {
      return !branches.get(branches.size() - 1).isEmpty();
    }

    void star() throws Invalid {
      int before = prev;
      if (peek() != '*') {
        push(new Token(ZERO_OR_MORE));
        return;
      }
      bump();
      if (!haveTokens()) {
        if (peek() != -1 && !isSeparator(peek())) {
          push(new Token(ZERO_OR_MORE));
          push(new Token(ZERO_OR_MORE));
        } else {
          push(new Token(RECURSIVE_PREFIX));
          bump();
        }
        return;
      }
      if (!(before != -1 && isSeparator(before))) {
        if (branches.size() <= 1 || (before != ',' && before != '{')) {
          push(new Token(ZERO_OR_MORE));
          push(new Token(ZERO_OR_MORE));
          return;
        }
      }
      boolean isSuffix;
      int next = peek();
      if (next == -1) {
        bump();
        isSuffix = true;
      } else if ((next == ',' || next == '}') && branches.size() >= 2) {
        isSuffix = true;
      } else if (isSeparator(next)) {
        bump();
        isSuffix = false;
      } else {
        push(new Token(ZERO_OR_MORE));
        push(new Token(ZERO_OR_MORE));
        return;
      }
      Token last = pop();
      if (last.is(RECURSIVE_PREFIX)) {
        push(last);
      } else if (last.is(RECURSIVE_SUFFIX)) {
        push(last);
      } else {
        push(new Token(isSuffix ? RECURSIVE_SUFFIX : RECURSIVE_ZERO_OR_MORE));
      }
    }

    void classToken() throws Invalid {
      List<int[]> ranges = new ArrayList<>();
      boolean negated = false;
      if (peek() == '!' || peek() == '^') {
        bump();
        negated = true;
      }
      boolean first = true;
      boolean inRange = false;
      while (true) {
        int c = bump();
        if (c == -1) {
          throw new Invalid("unclosed character class [");
        }
        if (c == ']') {
          if (first) {
            ranges.add(new int[] {']', ']'});
          } else {
            break;
          }
        } else if (c == '-') {
          if (first) {
            ranges.add(new int[] {'-', '-'});
          } else if (inRange) {
            addToLast(ranges, '-');
            inRange = false;
          } else {
            inRange = true;
          }
        } else if (c == '[' && !inRange && peek() == ':') {
          int[][] posix = posixClass();
          if (posix != null) {
            for (int[] r : posix) {
              ranges.add(r);
            }
          } else {
            ranges.add(new int[] {'[', '['});
          }
          inRange = false;
        } else {
          if (inRange) {
            addToLast(ranges, c);
          } else {
            ranges.add(new int[] {c, c});
          }
          inRange = false;
        }
        first = false;
      }
      if (inRange) {
        ranges.add(new int[] {'-', '-'});
      }
      push(new Token(Token.CLASS, negated, ranges, null));
    }

    void addToLast(List<int[]> ranges, int c) throws Invalid {
      int[] r = ranges.get(ranges.size() - 1);
      r[1] = c;
      if (r[1] < r[0]) {
        throw new Invalid("invalid range " + new String(Character.toChars(r[0])) + "-" + new String(Character.toChars(c)));
      }
    }

    /** After '[' with ':' next: a POSIX class's ranges, or null (state restored). */
    int[][] posixClass() {
      int savedPos = pos;
      int savedPrev = prev;
      int savedCur = cur;
      bump(); // ':'
      StringBuilder name = new StringBuilder();
      while (true) {
        int c = bump();
        if (c == ':' && peek() == ']') {
          bump();
          // An unknown name is not restored: globset then reads the '[' as a
          // literal and goes on after the name.
          return posixRanges(name.toString());
        } else if (c >= 'a' && c <= 'z' && name.length() < 8) {
          name.append((char) c);
        } else {
          break;
        }
      }
      pos = savedPos;
      prev = savedPrev;
      cur = savedCur;
      return null;
    }
  }

  private static int[][] posixRanges(String name) {
    switch (name) {
      case "alnum":
        return new int[][] {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}};
      case "alpha":
        return new int[][] {{'A', 'Z'}, {'a', 'z'}};
      case "blank":
        return new int[][] {{'\t', '\t'}, {' ', ' '}};
      case "cntrl":
        return new int[][] {{0, 0x1f}, {0x7f, 0x7f}};
      case "digit":
        return new int[][] {{'0', '9'}};
      case "graph":
        return new int[][] {{'!', '~'}};
      case "lower":
        return new int[][] {{'a', 'z'}};
      case "print":
        return new int[][] {{' ', '~'}};
      case "punct":
        return new int[][] {{'!', '/'}, {':', '@'}, {'[', '`'}, {'{', '~'}};
      case "space":
        return new int[][] {{'\t', '\r'}, {' ', ' '}};
      case "upper":
        return new int[][] {{'A', 'Z'}};
      case "xdigit":
        return new int[][] {{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
      default:
        return null;
    }
  }
}
