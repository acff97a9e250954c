package io.kafkaaudit.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.json.JSONArray;
import org.json.JSONObject;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Every conformance vector audit-lib generated (interceptors/conformance/vectors.json,
 * checked to be current by audit-lib's own test) replayed through the Java
 * implementation: the same hashes, buckets, times, durations, globs, scanner answers,
 * configs, classifications and audit-message JSON, byte for byte. Each section's check
 * collects every mismatch, so a failure lists them all; {@link
 * #an_altered_vector_is_caught} shows the comparison is not vacuous.
 */
class ConformanceTest {
  static JSONObject vectors;

  @BeforeAll
  static void load() throws IOException {
    String path = System.getProperty("kafka_audit.vectors", "../conformance/vectors.json");
    vectors = new JSONObject(Files.readString(Path.of(path), StandardCharsets.UTF_8));
  }

  static byte[] bytes(Object v) {
    if (v == null || v == JSONObject.NULL) {
      return null;
    }
    JSONObject o = (JSONObject) v;
    if (o.has("utf8")) {
      return o.getString("utf8").getBytes(StandardCharsets.UTF_8);
    }
    String hex = o.getString("hex");
    byte[] b = new byte[hex.length() / 2];
    for (int i = 0; i < b.length; i++) {
      b[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
    }
    return b;
  }

  static void assertNone(List<String> mismatches, int total) {
    assertTrue(total > 0, "no vectors in this section");
    assertTrue(
        mismatches.isEmpty(),
        mismatches.size() + " of " + total + " vectors disagree:\n" + String.join("\n", mismatches.subList(0, Math.min(40, mismatches.size()))));
  }

  @Test
  void message_hashes_equal_audit_libs() {
    JSONArray a = vectors.getJSONArray("hashes");
    List<String> bad = new ArrayList<>();
    for (int i = 0; i < a.length(); i++) {
      JSONObject v = a.getJSONObject(i);
      byte[] key = bytes(v.opt("key"));
      byte[] value = bytes(v.get("value"));
      String got = AuditJson.hex16(MessageHash.of(key, value));
      if (!got.equals(v.getString("hash"))) {
        bad.add("hash " + i + " (value " + value.length + " B): want " + v.getString("hash") + " got " + got);
      }
    }
    assertNone(bad, a.length());
  }

  @Test
  void latency_buckets_equal_audit_libs_at_every_boundary() {
    JSONArray a = vectors.getJSONArray("buckets");
    List<String> bad = new ArrayList<>();
    for (int i = 0; i < a.length(); i++) {
      long v = a.getJSONArray(i).getLong(0);
      int want = a.getJSONArray(i).getInt(1);
      int got = LatencyHistogram.bucketIndex(v);
      if (got != want) {
        bad.add("latency " + v + ": want bucket " + want + " got " + got);
      }
    }
    assertNone(bad, a.length());
  }

  static String timeResult(TimeParse.Result r) {
    switch (r.outcome) {
      case TIME:
        return "{\"ms\":" + r.ms + ",\"unit\":\"" + r.unit.label + "\"}";
      case OUT_OF_RANGE:
        return "{\"out_of_range\":{\"negative\":" + r.negative + ",\"unit\":\"" + r.unit.label + "\"}}";
      default:
        return "\"not_a_time\"";
    }
  }

  static String canonical(Object json) {
    if (json instanceof JSONObject) {
      JSONObject o = (JSONObject) json;
      List<String> keys = new ArrayList<>(o.keySet());
      java.util.Collections.sort(keys);
      StringBuilder b = new StringBuilder("{");
      for (String k : keys) {
        if (b.length() > 1) {
          b.append(',');
        }
        b.append(JSONObject.quote(k)).append(':').append(canonical(o.get(k)));
      }
      return b.append('}').toString();
    }
    if (json instanceof String) {
      return JSONObject.quote((String) json);
    }
    return String.valueOf(json);
  }

  @Test
  void times_equal_audit_libs() {
    JSONArray a = vectors.getJSONArray("times");
    List<String> bad = new ArrayList<>();
    for (int i = 0; i < a.length(); i++) {
      JSONObject v = a.getJSONObject(i);
      TimeParse.Result r = TimeParse.textToMs(v.getString("text"), TimeParse.Unit.parse(v.getString("unit")));
      String got = canonical(new JSONObject("{\"x\":" + timeResult(r) + "}").get("x"));
      String want = canonical(v.get("expect"));
      if (!got.equals(want)) {
        bad.add(JSONObject.quote(v.getString("text")) + " in " + v.getString("unit") + ": want " + want + " got " + got);
      }
    }
    assertNone(bad, a.length());
  }

  @Test
  void durations_equal_humantimes() {
    JSONArray a = vectors.getJSONArray("durations");
    List<String> bad = new ArrayList<>();
    for (int i = 0; i < a.length(); i++) {
      JSONObject v = a.getJSONObject(i);
      String got;
      try {
        Durations.Duration d = Durations.parse(v.getString("text"));
        got = d.secs + "s " + d.nanos + "ns";
      } catch (Durations.Invalid e) {
        got = "error";
      }
      String want = v.has("error") ? "error" : v.getBigInteger("secs") + "s " + v.getLong("nanos") + "ns";
      if (!got.equals(want)) {
        bad.add(JSONObject.quote(v.getString("text")) + ": want " + want + " got " + got);
      }
    }
    assertNone(bad, a.length());
  }

  @Test
  void topic_globs_equal_globsets() {
    JSONArray a = vectors.getJSONArray("globs");
    List<String> bad = new ArrayList<>();
    for (int i = 0; i < a.length(); i++) {
      JSONObject v = a.getJSONObject(i);
      String glob = v.getString("glob");
      TopicGlob g;
      try {
        g = TopicGlob.compile(glob);
      } catch (TopicGlob.Invalid e) {
        if (!v.has("error")) {
          bad.add(glob + ": rejected (" + e.getMessage() + "), audit-lib accepts it");
        }
        continue;
      }
      if (v.has("error")) {
        bad.add(glob + ": accepted, audit-lib rejects it");
        continue;
      }
      List<Object> want = v.getJSONArray("matches").toList();
      List<Object> got = new ArrayList<>();
      for (Object t : v.getJSONArray("topics").toList()) {
        if (g.matches((String) t)) {
          got.add(t);
        }
      }
      if (!got.equals(want)) {
        bad.add(glob + ": matches " + got + ", audit-lib " + want);
      }
    }
    assertNone(bad, a.length());
  }

  static String scanResult(JsonScan.Found f) {
    switch (f.kind) {
      case ERROR:
        return "\"error\"";
      case ABSENT:
        return "\"absent\"";
      case NULL:
        return "\"null\"";
      case BOOL:
        return "{\"bool\":" + f.bool + "}";
      case INT:
        return "{\"int\":" + f.integer + "}";
      case NUMBER:
        return "{\"number\":" + JSONObject.quote(f.text) + "}";
      case STRING:
        return "{\"string\":" + JSONObject.quote(f.text) + "}";
      default:
        return "\"compound\"";
    }
  }

  static byte[][] path(JSONArray p) {
    byte[][] out = new byte[p.length()][];
    for (int i = 0; i < out.length; i++) {
      out[i] = p.getString(i).getBytes(StandardCharsets.UTF_8);
    }
    return out;
  }

  @Test
  void the_field_scanner_agrees_with_audit_libs_on_every_document() {
    JSONArray a = vectors.getJSONArray("scans");
    List<String> bad = new ArrayList<>();
    for (int i = 0; i < a.length(); i++) {
      JSONObject v = a.getJSONObject(i);
      byte[] doc = bytes(v.get("doc"));
      String got = canonical(new JSONObject("{\"x\":" + scanResult(JsonScan.findPath(doc, path(v.getJSONArray("path")))) + "}").get("x"));
      String want = canonical(v.get("expect"));
      if (!got.equals(want)) {
        bad.add("scan " + i + " " + v.get("doc") + " " + v.getJSONArray("path") + ": want " + want + " got " + got);
      }
    }
    assertNone(bad, a.length());
  }

  static String ruleJson(EventTimeConfig.Rule r) {
    JSONObject o = new JSONObject();
    JSONArray paths = new JSONArray();
    for (String n : r.pathNames) {
      paths.put(new JSONArray(n.split("\\.", -1)));
    }
    o.put("paths", paths);
    o.put("unit", r.unit.label());
    o.put("header", r.header == null ? JSONObject.NULL : r.header);
    o.put("header_unit", r.headerUnit.label());
    o.put("record_timestamp", r.recordTimestamp);
    o.put("max_future_ms", r.maxFutureMs == null ? JSONObject.NULL : r.maxFutureMs);
    o.put("max_past_ms", r.maxPastMs == null ? JSONObject.NULL : r.maxPastMs);
    return canonical(o);
  }

  @Test
  void event_time_configs_compile_as_in_audit_lib() {
    JSONArray a = vectors.getJSONArray("configs");
    List<String> bad = new ArrayList<>();
    for (int i = 0; i < a.length(); i++) {
      JSONObject v = a.getJSONObject(i);
      String toml = v.getString("toml");
      EventTimeConfig c;
      try {
        c = EventTimeConfig.fromToml(toml);
      } catch (EventTimeConfig.Invalid e) {
        if (!v.has("error")) {
          bad.add("config " + i + " rejected (" + e.getMessage() + "), audit-lib accepts it:\n" + toml);
        }
        continue;
      }
      if (v.has("error")) {
        bad.add("config " + i + " accepted, audit-lib rejects it (" + v.getString("error") + "):\n" + toml);
        continue;
      }
      if (c.windowSizeMs != v.getLong("window_size_ms")) {
        bad.add("config " + i + ": window " + c.windowSizeMs + " ms, audit-lib " + v.getLong("window_size_ms"));
      }
      JSONArray rules = v.getJSONArray("rules");
      if (rules.length() != c.rules.size()) {
        bad.add("config " + i + ": " + c.rules.size() + " rules, audit-lib " + rules.length());
        continue;
      }
      for (int r = 0; r < rules.length(); r++) {
        String want = canonical(rules.getJSONObject(r));
        String got = ruleJson(c.rules.get(r));
        if (!want.equals(got)) {
          bad.add("config " + i + " rule " + r + ": want " + want + " got " + got);
        }
      }
      String want = canonical(v.getJSONObject("default"));
      if (!want.equals(ruleJson(c.defaultRule))) {
        bad.add("config " + i + " default: want " + want + " got " + ruleJson(c.defaultRule));
      }
      JSONArray probes = v.getJSONArray("probes");
      for (int p = 0; p < probes.length(); p++) {
        JSONObject probe = probes.getJSONObject(p);
        int wantRule = probe.isNull("rule") ? -1 : probe.getInt("rule");
        int gotRule = c.ruleIndex(probe.getString("topic"));
        if (wantRule != gotRule) {
          bad.add("config " + i + ": topic " + probe.getString("topic") + " gets rule " + gotRule + ", audit-lib " + wantRule);
        }
      }
    }
    assertNone(bad, a.length());
  }

  /** Every difference between a case's expectations and what Java computes. */
  static List<String> caseMismatches(JSONObject c) {
    List<String> bad = new ArrayList<>();
    String name = c.getString("name");
    EventTimeConfig config;
    try {
      config = EventTimeConfig.fromToml(c.getString("config"));
    } catch (EventTimeConfig.Invalid e) {
      bad.add(name + ": config rejected: " + e.getMessage());
      return bad;
    }
    Aggregator agg = new Aggregator(config, true, 10_000);
    JSONArray msgs = c.getJSONArray("messages");
    for (int i = 0; i < msgs.length(); i++) {
      JSONObject m = msgs.getJSONObject(i);
      String topic = m.getString("topic");
      byte[] key = bytes(m.opt("key"));
      byte[] value = bytes(m.opt("value"));
      JSONArray hs = m.getJSONArray("headers");
      Classifier.Headers headers =
          n -> {
            for (int h = 0; h < hs.length(); h++) {
              if (hs.getJSONArray(h).getString(0).equals(n)) {
                return bytes(hs.getJSONArray(h).get(1));
              }
            }
            return null;
          };
      Classifier.RecordTimestamp ts = null;
      if (!m.isNull("timestamp")) {
        JSONObject t = m.getJSONObject("timestamp");
        ts = new Classifier.RecordTimestamp(t.getLong("ms"), t.getString("type").equals("log_append_time"));
      }
      long observed = m.getLong("observed_at");
      EventTimeConfig.Rule rule = agg.ruleFor(topic);
      Classifier.Classification cl = Classifier.classify(rule, value, headers, ts, observed);
      JSONObject got = new JSONObject();
      got.put("label", cl.labelName());
      got.put("counted_at", cl.countedAt(observed));
      got.put("windowed_by", cl.windowedBy());
      if (cl.label == Classifier.Classification.EVENT_TIME || cl.label == Classifier.Classification.OUT_OF_BOUNDS) {
        got.put("event_time_ms", cl.eventTimeMs);
        got.put("source", cl.source == Classifier.Classification.HEADER ? "header" : "field" + cl.source);
        got.put("unit", cl.unit.label);
      }
      if (cl.label == Classifier.Classification.MALFORMED) {
        got.put("reason", cl.reasonName());
      }
      String want = canonical(m.getJSONObject("expect"));
      if (!canonical(got).equals(want)) {
        bad.add(name + " message " + i + " (" + m.opt("value") + "): want " + want + " got " + canonical(got));
      }
      long byteLen = (key == null ? 0 : key.length) + (value == null ? 0 : value.length);
      agg.record(topic, cl, MessageHash.of(key, value), byteLen, observed, ts, m.getInt("partition"), m.getLong("offset"));
    }
    JSONObject id = c.getJSONObject("identity");
    AuditJson.Identity identity = new AuditJson.Identity(id.getString("tier"), id.getString("datacenter"), id.getString("host"));
    List<Aggregator.Increment> drained = agg.drain();
    JSONArray uuids = c.getJSONArray("uuids");
    JSONArray want = c.getJSONArray("increments");
    if (drained.size() != want.length()) {
      bad.add(name + ": " + drained.size() + " increments, audit-lib " + want.length());
    }
    for (int i = 0; i < Math.min(drained.size(), want.length()); i++) {
      String got = AuditJson.increment(identity, UUID.fromString(uuids.getString(i)), c.getLong("drain_at"), drained.get(i));
      if (!got.equals(want.getString(i))) {
        bad.add(name + " increment " + i + ":\n want " + want.getString(i) + "\n got  " + got);
      }
    }
    return bad;
  }

  @Test
  void cases_classify_count_and_emit_byte_for_byte_as_audit_lib() {
    JSONArray cases = vectors.getJSONArray("cases");
    List<String> bad = new ArrayList<>();
    int total = 0;
    for (int i = 0; i < cases.length(); i++) {
      bad.addAll(caseMismatches(cases.getJSONObject(i)));
      total += cases.getJSONObject(i).getJSONArray("messages").length();
    }
    assertNone(bad, total);
  }

  /**
   * The comparison is not vacuous: a vector altered in any of its parts (a payload
   * byte, an observation time, a record timestamp's type, an expected JSON byte, an
   * expected classification) fails it.
   */
  @Test
  void an_altered_vector_is_caught() {
    JSONObject original = vectors.getJSONArray("cases").getJSONObject(0);
    assertEquals(List.of(), caseMismatches(original));
    List<java.util.function.Consumer<JSONObject>> alterations = List.of(
        c -> {
          JSONObject m = c.getJSONArray("messages").getJSONObject(0);
          String v = m.getJSONObject("value").getString("utf8");
          m.put("value", new JSONObject().put("utf8", v.replace('1', '2')));
        },
        c -> {
          JSONObject m = c.getJSONArray("messages").getJSONObject(44);
          m.put("observed_at", m.getLong("observed_at") + 1);
        },
        c -> {
          JSONObject m = c.getJSONArray("messages").getJSONObject(0);
          m.put("key", new JSONObject().put("utf8", "x"));
        },
        c -> c.getJSONArray("increments").put(0, c.getJSONArray("increments").getString(0).replace("\"count\":", "\"count\":1")),
        c -> c.getJSONArray("messages").getJSONObject(3).getJSONObject("expect").put("unit", "ms"),
        c -> c.put("drain_at", c.getLong("drain_at") + 1));
    for (int k = 0; k < alterations.size(); k++) {
      JSONObject altered = new JSONObject(original.toString());
      alterations.get(k).accept(altered);
      assertFalse(caseMismatches(altered).isEmpty(), "alteration " + k + " went unnoticed");
    }
  }
}
