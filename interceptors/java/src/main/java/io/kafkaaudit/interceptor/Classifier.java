package io.kafkaaudit.interceptor;

import java.nio.charset.StandardCharsets;

/**
 * How audit-lib classifies one message ({@code audit-lib/src/extract.rs}): the rule's
 * JSON fields in order, then its header; without either, the Kafka record timestamp
 * when it lies within the skew bounds of observation time; only then observation
 * time. Split in two so a producer can read the payload when it is sent and finish
 * when the record timestamp and outcome are known: {@link #scanPayload} then
 * {@link #finish}; {@link #classify} does both.
 */
final class Classifier {
  private Classifier() {}

  /** The first header named {@code name} (its value; null for none or a null value). */
  interface Headers {
    byte[] first(String name);
  }

  static final Headers NO_HEADERS = name -> null;

  /** What the payload gave: the first present field's time, or why there is none. */
  static final class PayloadTime {
    static final int ABSENT = 0;
    static final int NOT_JSON = 1;
    static final int FIELD = 2;

    final int kind;
    final int fieldIndex;
    /** For FIELD: TIME, OUT_OF_RANGE, or NOT_A_TIME (a value that is no time). */
    final TimeParse.Result found;

    private PayloadTime(int kind, int fieldIndex, TimeParse.Result found) {
      this.kind = kind;
      this.fieldIndex = fieldIndex;
      this.found = found;
    }

    static final PayloadTime ABSENT_TIME = new PayloadTime(ABSENT, 0, null);
    static final PayloadTime NOT_JSON_TIME = new PayloadTime(NOT_JSON, 0, null);
  }

  /** The payload part of classification; {@code value} null is a tombstone. */
  static PayloadTime scanPayload(EventTimeConfig.Rule rule, byte[] value) {
    if (value == null) {
      return PayloadTime.ABSENT_TIME;
    }
    for (int idx = 0; idx < rule.paths.length; idx++) {
      JsonScan.Found f = JsonScan.findPath(value, rule.paths[idx]);
      TimeParse.Result r;
      switch (f.kind) {
        case ERROR:
          return PayloadTime.NOT_JSON_TIME;
        case ABSENT:
        case NULL:
          continue;
        case INT:
          r = TimeParse.intToMs(f.integer, rule.unit);
          break;
        case NUMBER:
          r = TimeParse.numberToMs(f.text.getBytes(StandardCharsets.US_ASCII), rule.unit);
          break;
        case STRING:
          r = TimeParse.textToMs(f.text, rule.unit);
          break;
        default: // a boolean or a compound: present, not a time
          r = TimeParse.Result.NOT_A_TIME;
      }
      return new PayloadTime(PayloadTime.FIELD, Math.min(idx, 0xFFFF), r);
    }
    return PayloadTime.ABSENT_TIME;
  }

  /** The whole classification of one message. */
  static Classification classify(
      EventTimeConfig.Rule rule, byte[] value, Headers headers, RecordTimestamp recordTs, long observedAt) {
    return finish(rule, scanPayload(rule, value), headers, recordTs, observedAt);
  }

  /** A record's timestamp: its value and which clock wrote it. */
  static final class RecordTimestamp {
    final long ms;
    final boolean logAppendTime;

    RecordTimestamp(long ms, boolean logAppendTime) {
      this.ms = ms;
      this.logAppendTime = logAppendTime;
    }
  }

  static Classification finish(
      EventTimeConfig.Rule rule, PayloadTime p, Headers headers, RecordTimestamp recordTs, long observedAt) {
    return p.kind == PayloadTime.FIELD
        ? finish(rule, p.kind, p.fieldIndex, p.found.outcome, p.found.ms, p.found.unit, headers, recordTs, observedAt)
        : finish(rule, p.kind, 0, null, 0, null, headers, recordTs, observedAt);
  }

  /** {@link #finish(EventTimeConfig.Rule, PayloadTime, Headers, RecordTimestamp, long)} of a payload time kept in parts. */
  static Classification finish(
      EventTimeConfig.Rule rule,
      int payloadKind,
      int fieldIndex,
      TimeParse.Outcome found,
      long foundMs,
      TimeParse.TimeUnit foundUnit,
      Headers headers,
      RecordTimestamp recordTs,
      long observedAt) {
    RecordTimestamp fallback =
        recordTs != null && rule.recordTimestamp && rule.withinSkewBounds(recordTs.ms, observedAt) ? recordTs : null;
    if (payloadKind == PayloadTime.FIELD) {
      return bounded(rule, found, foundMs, foundUnit, fieldIndex, Classification.BAD_FIELD, fallback, observedAt);
    }
    boolean notJson = payloadKind == PayloadTime.NOT_JSON;
    if (rule.header != null) {
      byte[] h = headers.first(rule.header);
      if (h != null) {
        TimeParse.Result fromHeader =
            Utf8.isValid(h, 0, h.length)
                ? TimeParse.textToMs(new String(h, StandardCharsets.UTF_8), rule.headerUnit)
                : TimeParse.Result.NOT_A_TIME;
        int bad = notJson ? Classification.NOT_JSON : Classification.BAD_HEADER;
        return bounded(
            rule, fromHeader.outcome, fromHeader.ms, fromHeader.unit, Classification.HEADER, bad, fallback, observedAt);
      }
    }
    if (notJson) {
      return Classification.malformed(Classification.NOT_JSON, fallback);
    }
    return Classification.noTime(fallback);
  }

  private static Classification bounded(
      EventTimeConfig.Rule rule,
      TimeParse.Outcome outcome,
      long ms,
      TimeParse.TimeUnit unit,
      int source,
      int badReason,
      RecordTimestamp fallback,
      long observedAt) {
    switch (outcome) {
      case OUT_OF_RANGE:
        return Classification.outOfBounds(ms, source, unit, fallback);
      case NOT_A_TIME:
        return Classification.malformed(badReason, fallback);
      default:
        // Against the record timestamp when there is a usable one: every tier that
        // preserves it decides alike, however late it reads the message.
        long reference = fallback != null ? fallback.ms : observedAt;
        if (rule.withinSkewBounds(ms, reference)) {
          return Classification.eventTime(ms, source, unit);
        }
        return Classification.outOfBounds(ms, source, unit, fallback);
    }
  }

  /** The verdict for one message (audit-lib's {@code Classification}). */
  static final class Classification {
    static final int EVENT_TIME = 0;
    static final int OUT_OF_BOUNDS = 1;
    static final int NO_TIME = 2;
    static final int MALFORMED = 3;

    /** Source of an event time: a field index (>= 0) or the header. */
    static final int HEADER = -1;

    static final int NOT_JSON = 0;
    static final int BAD_FIELD = 1;
    static final int BAD_HEADER = 2;

    final int label;
    final long eventTimeMs;
    final int source;
    final TimeParse.TimeUnit unit;
    final int reason;
    /** The time that windows a message without an event time; null: observation time. */
    final RecordTimestamp fallback;

    private Classification(
        int label, long eventTimeMs, int source, TimeParse.TimeUnit unit, int reason, RecordTimestamp fallback) {
      this.label = label;
      this.eventTimeMs = eventTimeMs;
      this.source = source;
      this.unit = unit;
      this.reason = reason;
      this.fallback = fallback;
    }

    static Classification eventTime(long ms, int source, TimeParse.TimeUnit unit) {
      return new Classification(EVENT_TIME, ms, source, unit, 0, null);
    }

    static Classification outOfBounds(long ms, int source, TimeParse.TimeUnit unit, RecordTimestamp fallback) {
      return new Classification(OUT_OF_BOUNDS, ms, source, unit, 0, fallback);
    }

    static Classification noTime(RecordTimestamp fallback) {
      return new Classification(NO_TIME, 0, 0, null, 0, fallback);
    }

    static Classification malformed(int reason, RecordTimestamp fallback) {
      return new Classification(MALFORMED, 0, 0, null, reason, fallback);
    }

    /** Windowed by a time every tier sees alike (so counted and compared). */
    boolean isTierInvariant() {
      return label == EVENT_TIME || fallback != null;
    }

    /** The time that windows the message. */
    long countedAt(long observedAt) {
      if (label == EVENT_TIME) {
        return eventTimeMs;
      }
      return fallback != null ? fallback.ms : observedAt;
    }

    String labelName() {
      switch (label) {
        case EVENT_TIME:
          return "event_time";
        case OUT_OF_BOUNDS:
          return "out_of_bounds";
        case NO_TIME:
          return "no_time";
        default:
          return "malformed";
      }
    }

    String windowedBy() {
      if (label == EVENT_TIME) {
        return "event_time";
      }
      if (fallback == null) {
        return "observation";
      }
      return fallback.logAppendTime ? "log_append_time" : "create_time";
    }

    String reasonName() {
      switch (reason) {
        case NOT_JSON:
          return "not_json";
        case BAD_FIELD:
          return "bad_field";
        default:
          return "bad_header";
      }
    }
  }
}
