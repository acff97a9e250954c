package io.kafkaaudit.interceptor;

import java.util.UUID;

/**
 * The audit message format v1 ({@code docs/audit-message-v1.md}), written byte for
 * byte as audit-lib writes it: the same field order, the same string escaping
 * (serde_json's), {@code observation_time_count}, {@code offsets} and their times only
 * when present.
 */
final class AuditJson {
  private AuditJson() {}

  /** Who emits: the observation point. */
  static final class Identity {
    final String tier;
    final String datacenter;
    final String host;

    Identity(String tier, String datacenter, String host) {
      this.tier = tier;
      this.datacenter = datacenter;
      this.host = host;
    }
  }

  static String increment(Identity id, UUID uuid, long emittedAt, Aggregator.Increment inc) {
    WindowStats st = inc.stats;
    StringBuilder out = new StringBuilder(256);
    out.append("{\"version\":1,\"kind\":\"increment\",\"uuid\":\"").append(uuid).append('"');
    out.append(",\"tier\":");
    string(id.tier, out);
    out.append(",\"datacenter\":");
    string(id.datacenter, out);
    out.append(",\"host\":");
    string(id.host, out);
    out.append(",\"topic\":");
    string(inc.topic, out);
    out.append(",\"emitted_at\":").append(emittedAt);
    out.append(",\"window_start\":").append(inc.windowStart);
    out.append(",\"window_end\":").append(inc.windowEnd);
    out.append(",\"count\":").append(Long.toUnsignedString(st.count));
    out.append(",\"bytes\":").append(Long.toUnsignedString(st.bytes));
    out.append(",\"no_time_count\":").append(Long.toUnsignedString(st.noTimeCount));
    out.append(",\"malformed_count\":").append(Long.toUnsignedString(st.malformedCount));
    out.append(",\"out_of_bounds_count\":").append(Long.toUnsignedString(st.outOfBoundsCount));
    if (st.observationTimeCount != 0) {
      out.append(",\"observation_time_count\":").append(Long.toUnsignedString(st.observationTimeCount));
    }
    if (st.deliveryFailedCount != 0) {
      out.append(",\"delivery_failed_count\":").append(Long.toUnsignedString(st.deliveryFailedCount));
    }
    out.append(",\"checksum\":\"").append(hex16(st.checksum)).append('"');
    out.append(",\"latency\":");
    st.latency.writeJson(out);
    if (!st.offsets.isEmpty()) {
      out.append(",\"offsets\":[");
      for (int i = 0; i < st.offsets.size(); i++) {
        if (i > 0) {
          out.append(',');
        }
        st.offsets.get(i).writeJson(out);
      }
      out.append(']');
    }
    if (st.maxObservedAt != WindowStats.NONE) {
      out.append(",\"max_observed_at\":").append(st.maxObservedAt);
    }
    return out.append('}').toString();
  }

  static String hex16(long v) {
    String h = Long.toHexString(v);
    return "0000000000000000".substring(h.length()) + h;
  }

  /** A JSON string as serde_json writes it. */
  static void string(String s, StringBuilder out) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"':
          out.append("\\\"");
          break;
        case '\\':
          out.append("\\\\");
          break;
        case '\b':
          out.append("\\b");
          break;
        case '\f':
          out.append("\\f");
          break;
        case '\n':
          out.append("\\n");
          break;
        case '\r':
          out.append("\\r");
          break;
        case '\t':
          out.append("\\t");
          break;
        default:
          if (c < 0x20) {
            out.append("\\u00").append(Character.forDigit(c >> 4, 16)).append(Character.forDigit(c & 0xf, 16));
          } else {
            out.append(c);
          }
      }
    }
    out.append('"');
  }
}
