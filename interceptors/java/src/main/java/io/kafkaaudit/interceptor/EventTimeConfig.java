package io.kafkaaudit.interceptor;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * The event-time configuration, compiled: what audit.toml's {@code [audit.event_time]}
 * holds ({@code window_size}, {@code [[rules]]}, {@code [default]}; see
 * docs/event-time.md), read from TOML with audit-lib's rules (unknown keys are errors,
 * the same defaults and bounds) and looked up by topic as audit-lib does.
 */
final class EventTimeConfig {
  final long windowSizeMs;
  private final List<Object> matchers; // TopicGlob or Pattern, per rule
  final List<Rule> rules;
  final Rule defaultRule;

  private EventTimeConfig(long windowSizeMs, List<Object> matchers, List<Rule> rules, Rule defaultRule) {
    this.windowSizeMs = windowSizeMs;
    this.matchers = matchers;
    this.rules = rules;
    this.defaultRule = defaultRule;
  }

  /** A rule ready for classification: paths split, bounds in ms (null: unbounded). */
  static final class Rule {
    final List<String> pathNames;
    final byte[][][] paths;
    final TimeParse.Unit unit;
    final String header;
    final TimeParse.Unit headerUnit;
    final boolean recordTimestamp;
    final Long maxFutureMs;
    final Long maxPastMs;

    Rule(
        List<String> pathNames,
        TimeParse.Unit unit,
        String header,
        TimeParse.Unit headerUnit,
        boolean recordTimestamp,
        Long maxFutureMs,
        Long maxPastMs) {
      this.pathNames = pathNames;
      this.paths = new byte[pathNames.size()][][];
      for (int i = 0; i < pathNames.size(); i++) {
        String[] segs = pathNames.get(i).split("\\.", -1);
        paths[i] = new byte[segs.length][];
        for (int k = 0; k < segs.length; k++) {
          paths[i][k] = segs[k].getBytes(StandardCharsets.UTF_8);
        }
      }
      this.unit = unit;
      this.header = header;
      this.headerUnit = headerUnit;
      this.recordTimestamp = recordTimestamp;
      this.maxFutureMs = maxFutureMs;
      this.maxPastMs = maxPastMs;
    }

    /** Whether {@code t} lies within the skew bounds around {@code reference}. */
    boolean withinSkewBounds(long t, long reference) {
      // audit-lib computes t - reference in 128 bits: an overflowing difference is
      // beyond every bound, on the side of its sign.
      long ahead = t - reference;
      boolean tooNew;
      boolean tooOld;
      if (((t ^ reference) & (t ^ ahead)) < 0) {
        tooNew = t > reference && maxFutureMs != null;
        tooOld = t < reference && maxPastMs != null;
      } else {
        tooNew = maxFutureMs != null && ahead > maxFutureMs;
        tooOld = maxPastMs != null && (ahead == Long.MIN_VALUE || -ahead > maxPastMs);
      }
      return !(tooNew || tooOld);
    }
  }

  /** The rule of {@code topic}: the first whose pattern matches, else the default. */
  Rule ruleFor(String topic) {
    for (int i = 0; i < matchers.size(); i++) {
      Object m = matchers.get(i);
      boolean hit = m instanceof TopicGlob ? ((TopicGlob) m).matches(topic) : ((Pattern) m).matcher(topic).find();
      if (hit) {
        return rules.get(i);
      }
    }
    return defaultRule;
  }

  /** Index of the rule {@code topic} gets, or -1 for the default. */
  int ruleIndex(String topic) {
    Rule r = ruleFor(topic);
    return r == defaultRule ? -1 : rules.indexOf(r);
  }

  /** Why a configuration is not valid; the message says where. */
  static final class Invalid extends Exception {
    private static final long serialVersionUID = 1L;

    Invalid(String message) {
      super(message);
    }
  }

  static final long DEFAULT_WINDOW_MS = 600_000;
  private static final long DEFAULT_MAX_FUTURE_MS = 3_600_000;
  private static final long DEFAULT_MAX_PAST_MS = 30L * 86_400_000;

  private static final Set<String> TOP = Set.of("window_size", "rules", "default");
  private static final Set<String> TIME_RULE =
      Set.of("fields", "field", "unit", "header", "header_unit", "record_timestamp", "max_future", "max_past");
  private static final Set<String> TOPIC_RULE;

  static {
    Set<String> s = new LinkedHashSet<>(TIME_RULE);
    s.add("topic");
    s.add("topic_regex");
    TOPIC_RULE = s;
  }

  /** The configuration of an empty file: every default. */
  static EventTimeConfig defaults() {
    try {
      return fromToml("");
    } catch (Invalid e) {
      throw new AssertionError(e);
    }
  }

  static EventTimeConfig fromToml(String text) throws Invalid {
    Map<String, Object> doc;
    try {
      doc = Toml.parse(text);
    } catch (Toml.ParseError e) {
      throw new Invalid("event-time config is not valid TOML: " + e.getMessage());
    }
    unknownKeys(doc, TOP, "event-time config");
    long window = DEFAULT_WINDOW_MS;
    if (doc.containsKey("window_size")) {
      long ms = duration(doc.get("window_size"), "window_size");
      if (ms <= 0) {
        throw new Invalid("event-time config: window_size must be between 1 ms and i64::MAX ms, got " + ms + " ms");
      }
      window = ms;
    }
    List<Object> matchers = new ArrayList<>();
    List<Rule> rules = new ArrayList<>();
    Object rs = doc.get("rules");
    if (rs != null) {
      if (!(rs instanceof List)) {
        throw new Invalid("event-time config: `rules` must be an array of tables");
      }
      List<?> list = (List<?>) rs;
      for (int index = 0; index < list.size(); index++) {
        Object r = list.get(index);
        if (!(r instanceof Map)) {
          throw new Invalid("event-time config: rules[" + index + "] must be a table");
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> t = (Map<String, Object>) r;
        String where = "event-time rule " + index;
        unknownKeys(t, TOPIC_RULE, where);
        String glob = string(t, "topic", where);
        String regex = string(t, "topic_regex", where);
        Rule rule = rule(t, where);
        if ((glob == null) == (regex == null)) {
          throw new Invalid(where + ": give exactly one of `topic` (glob) or `topic_regex`");
        }
        if (glob != null) {
          try {
            matchers.add(TopicGlob.compile(glob));
          } catch (TopicGlob.Invalid e) {
            throw new Invalid(where + ": invalid topic glob \"" + glob + "\": " + e.getMessage());
          }
        } else {
          try {
            // Rust's regex classes are Unicode-aware: \d, \w, \s mean the same here.
            matchers.add(Pattern.compile(regex, Pattern.UNICODE_CHARACTER_CLASS));
          } catch (PatternSyntaxException e) {
            throw new Invalid(where + ": invalid topic regex \"" + regex + "\": " + e.getDescription());
          }
        }
        rules.add(rule);
      }
    }
    Rule def;
    Object d = doc.get("default");
    if (d == null) {
      def = rule(Map.of(), "event-time default");
    } else if (d instanceof Map) {
      @SuppressWarnings("unchecked")
      Map<String, Object> t = (Map<String, Object>) d;
      unknownKeys(t, TIME_RULE, "event-time default");
      def = rule(t, "event-time default");
    } else {
      throw new Invalid("event-time config: `default` must be a table");
    }
    return new EventTimeConfig(window, matchers, rules, def);
  }

  private static void unknownKeys(Map<String, Object> t, Set<String> known, String where) throws Invalid {
    for (String k : t.keySet()) {
      if (!known.contains(k)) {
        throw new Invalid(where + ": unknown field `" + k + "`, expected one of " + String.join(", ", known));
      }
    }
  }

  private static Rule rule(Map<String, Object> t, String where) throws Invalid {
    List<String> names = new ArrayList<>();
    String field = string(t, "field", where);
    if (field != null) {
      names.add(field);
    }
    List<String> fields = Arrays.asList("ts", "timestamp");
    if (t.containsKey("fields")) {
      Object f = t.get("fields");
      if (!(f instanceof List)) {
        throw new Invalid(where + ": `fields` must be an array of strings");
      }
      fields = new ArrayList<>();
      for (Object o : (List<?>) f) {
        if (!(o instanceof String)) {
          throw new Invalid(where + ": `fields` must be an array of strings");
        }
        fields.add((String) o);
      }
    }
    for (String f : fields) {
      if (!names.contains(f)) {
        names.add(f);
      }
    }
    for (String n : names) {
      for (String seg : n.split("\\.", -1)) {
        if (seg.isEmpty()) {
          throw new Invalid(where + ": invalid field path \"" + n + "\" (empty segment)");
        }
      }
    }
    TimeParse.Unit unit = unit(t, "unit", where);
    TimeParse.Unit headerUnit = unit(t, "header_unit", where);
    String header = string(t, "header", where);
    boolean recordTimestamp = true;
    if (t.containsKey("record_timestamp")) {
      Object o = t.get("record_timestamp");
      if (!(o instanceof Boolean)) {
        throw new Invalid(where + ": `record_timestamp` must be true or false");
      }
      recordTimestamp = (Boolean) o;
    }
    Long maxFuture = t.containsKey("max_future") ? bound(t.get("max_future"), "max_future", where) : DEFAULT_MAX_FUTURE_MS;
    Long maxPast = t.containsKey("max_past") ? bound(t.get("max_past"), "max_past", where) : DEFAULT_MAX_PAST_MS;
    return new Rule(names, unit, header, headerUnit, recordTimestamp, maxFuture, maxPast);
  }

  private static long bound(Object v, String what, String where) throws Invalid {
    long ms = duration(v, where + ": " + what);
    if (ms < 0) {
      throw new Invalid(where + ": skew bound " + what + " is too large");
    }
    return ms;
  }

  /** A humantime duration string in whole ms; -1 when it does not fit in an i64. */
  private static long duration(Object v, String what) throws Invalid {
    if (!(v instanceof String)) {
      throw new Invalid(what + ": expected a duration string such as \"10m\"");
    }
    try {
      return Durations.parse((String) v).millisOrMinusOne();
    } catch (Durations.Invalid e) {
      throw new Invalid(what + ": invalid duration \"" + v + "\": " + e.getMessage());
    }
  }

  private static String string(Map<String, Object> t, String key, String where) throws Invalid {
    Object o = t.get(key);
    if (o == null) {
      return null;
    }
    if (!(o instanceof String)) {
      throw new Invalid(where + ": `" + key + "` must be a string");
    }
    return (String) o;
  }

  private static TimeParse.Unit unit(Map<String, Object> t, String key, String where) throws Invalid {
    String s = string(t, key, where);
    if (s == null) {
      return TimeParse.Unit.AUTO;
    }
    TimeParse.Unit u = TimeParse.Unit.parse(s);
    if (u == null) {
      throw new Invalid(where + ": unknown " + key + " \"" + s + "\", expected auto, s, ms, us or ns");
    }
    return u;
  }
}
