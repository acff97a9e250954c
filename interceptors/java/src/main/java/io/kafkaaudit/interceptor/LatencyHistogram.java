package io.kafkaaudit.interceptor;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * audit-lib's mergeable latency histogram ({@code audit-lib/src/histogram.rs}): a
 * latency {@code v >= 1} ms falls in bucket {@code ceil(ln v / ln 1.02)}, smaller ones
 * in {@code zero_count}. The bucket of a latency is looked up in the table of each
 * bucket's largest latency that audit-lib computed ({@code latency-buckets.txt},
 * generated with the conformance vectors): Java's logarithm may round differently from
 * Rust's by an ulp, which at a bucket boundary is another bucket.
 */
final class LatencyHistogram {
  /** LARGEST[i]: the largest latency (ms) of bucket i; above the last: the top bucket. */
  private static final long[] LARGEST = load();

  private static long[] load() {
    try (InputStream in = LatencyHistogram.class.getResourceAsStream("latency-buckets.txt")) {
      if (in == null) {
        throw new IllegalStateException("latency-buckets.txt is missing from the jar");
      }
      BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.US_ASCII));
      List<Long> v = new ArrayList<>();
      for (String line; (line = r.readLine()) != null; ) {
        if (!line.isEmpty() && line.charAt(0) != '#') {
          v.add(Long.parseLong(line.trim()));
        }
      }
      long[] out = new long[v.size()];
      for (int i = 0; i < out.length; i++) {
        out[i] = v.get(i);
      }
      return out;
    } catch (IOException e) {
      throw new IllegalStateException("cannot read latency-buckets.txt", e);
    }
  }

  private static final double LN_GAMMA = Math.log(1.02);

  /**
   * The bucket of a latency of at least 1 ms: the first bucket whose largest latency is
   * not below it. Java's logarithm gives the bucket or its neighbour; the table decides.
   */
  static int bucketIndex(long v) {
    int i = (int) Math.ceil(Math.log((double) v) / LN_GAMMA);
    if (i < 0) {
      i = 0;
    } else if (i > LARGEST.length) {
      i = LARGEST.length;
    }
    while (i > 0 && v <= LARGEST[i - 1]) {
      i--;
    }
    while (i < LARGEST.length && v > LARGEST[i]) {
      i++;
    }
    return i;
  }

  private long zeroCount;
  private long negativeCount;
  private int base;
  private long[] counts = new long[0];
  private long maxMs;

  void record(long latencyMs) {
    if (latencyMs < 1) {
      zeroCount++;
      if (latencyMs < 0) {
        negativeCount++;
      }
      return;
    }
    if (latencyMs > maxMs) {
      maxMs = latencyMs;
    }
    slot(bucketIndex(latencyMs), 1);
  }

  private void slot(int i, long n) {
    if (counts.length == 0) {
      base = i;
      counts = new long[4];
    } else if (i < base) {
      int grow = Math.min(Math.max(base - i, counts.length), base);
      long[] c = new long[counts.length + grow];
      System.arraycopy(counts, 0, c, grow, counts.length);
      counts = c;
      base -= grow;
    }
    int at = i - base;
    if (at >= counts.length) {
      counts = Arrays.copyOf(counts, Math.max(at + 1, counts.length * 2));
    }
    counts[at] += n;
  }

  /** Adds {@code other}: exactly as if its latencies had been recorded here. */
  void merge(LatencyHistogram other) {
    zeroCount += other.zeroCount;
    negativeCount += other.negativeCount;
    maxMs = Math.max(maxMs, other.maxMs);
    for (int k = 0; k < other.counts.length; k++) {
      if (other.counts[k] != 0) {
        slot(other.base + k, other.counts[k]);
      }
    }
  }

  /** The wire form: {@code {"zero_count":..,"negative_count":..,"buckets":[[i,n],..],"max_ms":..}}. */
  void writeJson(StringBuilder out) {
    out.append("{\"zero_count\":").append(Long.toUnsignedString(zeroCount));
    out.append(",\"negative_count\":").append(Long.toUnsignedString(negativeCount));
    out.append(",\"buckets\":[");
    boolean first = true;
    for (int k = 0; k < counts.length; k++) {
      if (counts[k] != 0) {
        if (!first) {
          out.append(',');
        }
        first = false;
        out.append('[').append(base + k).append(',').append(Long.toUnsignedString(counts[k])).append(']');
      }
    }
    out.append("],\"max_ms\":").append(maxMs).append('}');
  }
}
