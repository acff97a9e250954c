package io.kafkaaudit.interceptor;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * The statistics of one (topic, window) counted by one emitter: the payload of an
 * increment, accumulated as audit-lib's {@code WindowStats::record} does.
 */
final class WindowStats {
  long count;
  long bytes;
  long noTimeCount;
  long malformedCount;
  long outOfBoundsCount;
  long observationTimeCount;
  /**
   * Not in {@code count}: records a producer was told it could not deliver, windowed like
   * {@code count} (the format's {@code delivery_failed_count}; written only when not 0).
   */
  long deliveryFailedCount;
  long checksum;
  final LatencyHistogram latency = new LatencyHistogram();
  final List<OffsetSpan> offsets = new ArrayList<>(2);
  /**
   * When this emitter last counted a message of the window (its clock): the record-time
   * evidence of an emitter that knows no partitions (docs/web.md, Verdicts, rule 4).
   * {@link #NONE} until one is.
   */
  long maxObservedAt = NONE;

  /** No time known (the format leaves the field out); below every time, so max keeps it. */
  static final long NONE = Long.MIN_VALUE;
  /** audit-lib's {@code RECORD_TIME_SLACK_MS}: how far past the observer's clock a record time may be. */
  static final long RECORD_TIME_SLACK_MS = 1_000;

  /**
   * Lowest and highest offset counted in one partition, and the latest record time
   * counted there (the record-time evidence: a downstream tier must read past it).
   */
  static final class OffsetSpan {
    final int partition;
    long min;
    long max;
    long maxRecordTime;

    OffsetSpan(int partition, long offset, long recordTime) {
      this.partition = partition;
      this.min = offset;
      this.max = offset;
      this.maxRecordTime = recordTime;
    }

    void writeJson(StringBuilder out) {
      out.append("{\"partition\":").append(partition);
      out.append(",\"min\":").append(min);
      out.append(",\"max\":").append(max);
      if (maxRecordTime != NONE) {
        out.append(",\"max_record_time\":").append(maxRecordTime);
      }
      out.append('}');
    }
  }

  /**
   * The record time counted for a message with timestamp {@code ts} observed at
   * {@code observedAt}, as audit-lib's {@code Counted::of} has it: capped at the
   * observer's clock plus the slack (a producer with a fast clock cannot stamp a
   * record past "now"); times before the epoch are none (Kafka's -1).
   */
  static long recordTime(Classifier.RecordTimestamp ts, long observedAt) {
    if (ts == null) {
      return NONE;
    }
    long cap = observedAt > Long.MAX_VALUE - RECORD_TIME_SLACK_MS ? Long.MAX_VALUE : observedAt + RECORD_TIME_SLACK_MS;
    long t = Math.min(ts.ms, cap);
    return t >= 0 ? t : NONE;
  }

  boolean isEmpty() {
    return count == 0 && observationTimeCount == 0 && deliveryFailedCount == 0;
  }

  /** How a message counts in its window: a {@link Classifier.Classification} label, or this. */
  static final int OBSERVATION_TIME = 4;

  /** The kind {@code c} counts as. */
  static int kindOf(Classifier.Classification c) {
    return c.isTierInvariant() ? c.label : OBSERVATION_TIME;
  }

  /**
   * Counts one message classified as {@code c}, with its checksum hash and size, and
   * its record timestamp {@code ts} (null: none).
   */
  void record(
      Classifier.Classification c, long hash, long byteLen, long observedAt, Classifier.RecordTimestamp ts, int partition, long offset, boolean trackOffsets) {
    add(
        kindOf(c),
        hash,
        byteLen,
        saturatingSub(observedAt, c.countedAt(observedAt)),
        observedAt,
        recordTime(ts, observedAt),
        partition,
        offset,
        trackOffsets);
  }

  /**
   * Counts one message by its contribution, computed when it was observed (a consumer
   * keeps these until its group commits the message). Offsets below 0 (none known)
   * are not tracked; {@code recordTime} is {@link #recordTime}'s.
   */
  void add(
      int kind, long hash, long byteLen, long latencyMs, long observedAt, long recordTime, int partition, long offset, boolean trackOffsets) {
    if (kind != OBSERVATION_TIME) {
      count++;
      bytes += byteLen;
      checksum += hash;
      latency.record(latencyMs);
      switch (kind) {
        case Classifier.Classification.NO_TIME:
          noTimeCount++;
          break;
        case Classifier.Classification.MALFORMED:
          malformedCount++;
          break;
        case Classifier.Classification.OUT_OF_BOUNDS:
          outOfBoundsCount++;
          break;
        default:
          break;
      }
    } else {
      observationTimeCount++;
    }
    maxObservedAt = Math.max(maxObservedAt, observedAt);
    if (trackOffsets && offset >= 0) {
      trackOffset(partition, offset, recordTime);
    }
  }

  static long saturatingSub(long a, long b) {
    long r = a - b;
    if (((a ^ b) & (a ^ r)) < 0) {
      return a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
    }
    return r;
  }

  void trackOffset(int partition, long offset, long recordTime) {
    // Indexed: an iterator per message showed in the producer's allocation profile.
    for (int i = 0; i < offsets.size(); i++) {
      OffsetSpan s = offsets.get(i);
      if (s.partition == partition) {
        s.min = Math.min(s.min, offset);
        s.max = Math.max(s.max, offset);
        s.maxRecordTime = Math.max(s.maxRecordTime, recordTime);
        return;
      }
    }
    offsets.add(new OffsetSpan(partition, offset, recordTime));
  }

  void merge(WindowStats o) {
    count += o.count;
    bytes += o.bytes;
    noTimeCount += o.noTimeCount;
    malformedCount += o.malformedCount;
    outOfBoundsCount += o.outOfBoundsCount;
    observationTimeCount += o.observationTimeCount;
    deliveryFailedCount += o.deliveryFailedCount;
    checksum += o.checksum;
    latency.merge(o.latency);
    maxObservedAt = Math.max(maxObservedAt, o.maxObservedAt);
    for (OffsetSpan s : o.offsets) {
      trackOffset(s.partition, s.min, s.maxRecordTime);
      trackOffset(s.partition, s.max, NONE);
    }
  }

  void sortOffsets() {
    offsets.sort(Comparator.comparingInt(s -> s.partition));
  }
}
