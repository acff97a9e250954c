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
   * Not in {@code count}: records a producer was told it could not deliver, windowed
   * like {@code count} (the field issue #26 adds to the format; written only when not 0).
   */
  long deliveryFailedCount;
  long checksum;
  final LatencyHistogram latency = new LatencyHistogram();
  final List<OffsetSpan> offsets = new ArrayList<>(2);

  /**
   * Lowest and highest offset counted in one partition. New per-span fields (an
   * optional {@code max_record_time}, say) go here and in {@link #writeJson}.
   */
  static final class OffsetSpan {
    final int partition;
    long min;
    long max;

    OffsetSpan(int partition, long offset) {
      this.partition = partition;
      this.min = offset;
      this.max = offset;
    }

    void writeJson(StringBuilder out) {
      out.append("{\"partition\":").append(partition);
      out.append(",\"min\":").append(min);
      out.append(",\"max\":").append(max).append('}');
    }
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

  /** Counts one message classified as {@code c}, with its checksum hash and size. */
  void record(Classifier.Classification c, long hash, long byteLen, long observedAt, int partition, long offset, boolean trackOffsets) {
    add(kindOf(c), hash, byteLen, saturatingSub(observedAt, c.countedAt(observedAt)), partition, offset, trackOffsets);
  }

  /**
   * Counts one message by its contribution, computed when it was observed (a consumer
   * keeps these until its group commits the message). Offsets below 0 (none known)
   * are not tracked.
   */
  void add(int kind, long hash, long byteLen, long latencyMs, int partition, long offset, boolean trackOffsets) {
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
    if (trackOffsets && offset >= 0) {
      trackOffset(partition, offset);
    }
  }

  static long saturatingSub(long a, long b) {
    long r = a - b;
    if (((a ^ b) & (a ^ r)) < 0) {
      return a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
    }
    return r;
  }

  void trackOffset(int partition, long offset) {
    // Indexed: an iterator per message showed in the producer's allocation profile.
    for (int i = 0; i < offsets.size(); i++) {
      OffsetSpan s = offsets.get(i);
      if (s.partition == partition) {
        s.min = Math.min(s.min, offset);
        s.max = Math.max(s.max, offset);
        return;
      }
    }
    offsets.add(new OffsetSpan(partition, offset));
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
    for (OffsetSpan s : o.offsets) {
      trackOffset(s.partition, s.min);
      trackOffset(s.partition, s.max);
    }
  }

  void sortOffsets() {
    offsets.sort(Comparator.comparingInt(s -> s.partition));
  }
}
