package io.kafkaaudit.interceptor;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Per-(topic, window) statistics, drained as increments in audit-lib's order (topic by
 * its UTF-8 bytes, then window). Not thread-safe: the interceptors lock around it.
 * Bounded as audit-lib's aggregator is: beyond {@code maxOpenWindows} the oldest
 * windows wait, merged, for the next drain (never dropped).
 */
final class Aggregator {
  private final EventTimeConfig config;
  private final boolean trackOffsets;
  private final int maxOpenWindows;
  private final Map<String, Topic> topics = new HashMap<>();
  private int open;
  private final List<Increment> evicted = new ArrayList<>();

  private static final class Topic {
    final String name;
    final EventTimeConfig.Rule rule;
    final TreeMap<Long, WindowStats> windows = new TreeMap<>();
    /** Consecutive messages mostly fall in one window: the last one, without a tree search. */
    long lastIndex;
    WindowStats last;

    Topic(String name, EventTimeConfig.Rule rule) {
      this.name = name;
      this.rule = rule;
    }
  }

  /** The statistics of one topic's window since the previous drain. */
  static final class Increment {
    final String topic;
    final long windowStart;
    final long windowEnd;
    final WindowStats stats;

    Increment(String topic, long windowStart, long windowEnd, WindowStats stats) {
      this.topic = topic;
      this.windowStart = windowStart;
      this.windowEnd = windowEnd;
      this.stats = stats;
    }
  }

  Aggregator(EventTimeConfig config, boolean trackOffsets, int maxOpenWindows) {
    this.config = config;
    this.trackOffsets = trackOffsets;
    this.maxOpenWindows = Math.max(1, maxOpenWindows);
  }

  EventTimeConfig config() {
    return config;
  }

  /** The rule of a topic (cached per topic, as a glob or regex decides it). */
  EventTimeConfig.Rule ruleFor(String topic) {
    return topic(topic).rule;
  }

  private Topic lastTopic;

  private Topic topic(String name) {
    Topic t = lastTopic;
    if (t != null && t.name.equals(name)) {
      return t;
    }
    t = topics.get(name);
    if (t == null) {
      t = new Topic(name, config.ruleFor(name));
      topics.put(name, t);
    }
    lastTopic = t;
    return t;
  }

  /** Counts one classified message; an offset below 0 (none known) is not tracked. */
  void record(
      String topicName, Classifier.Classification c, long hash, long byteLen, long observedAt, Classifier.RecordTimestamp ts, int partition, long offset) {
    window(topicName, Math.floorDiv(c.countedAt(observedAt), config.windowSizeMs))
        .record(c, hash, byteLen, observedAt, ts, partition, offset, trackOffsets);
  }

  /** Counts one message by the contribution kept since it was observed (see {@link WindowStats#add}). */
  void add(
      String topicName, long windowIndex, int kind, long hash, long byteLen, long latencyMs, long observedAt, long recordTime, int partition, long offset) {
    window(topicName, windowIndex).add(kind, hash, byteLen, latencyMs, observedAt, recordTime, partition, offset, trackOffsets);
  }

  /** Counts one record whose delivery failed, in the window of {@code countedAt}. */
  void deliveryFailed(String topicName, long countedAt) {
    window(topicName, Math.floorDiv(countedAt, config.windowSizeMs)).deliveryFailedCount++;
  }

  long windowIndex(long countedAt) {
    return Math.floorDiv(countedAt, config.windowSizeMs);
  }

  private WindowStats window(String topicName, long index) {
    Topic t = topic(topicName);
    if (t.last != null && t.lastIndex == index) {
      return t.last;
    }
    WindowStats w = t.windows.get(index);
    if (w == null) {
      while (open >= maxOpenWindows) {
        evictOldest();
      }
      w = new WindowStats();
      t.windows.put(index, w);
      open++;
    }
    t.last = w;
    t.lastIndex = index;
    return w;
  }

  private void evictOldest() {
    Topic oldest = null;
    for (Topic t : topics.values()) {
      if (!t.windows.isEmpty() && (oldest == null || t.windows.firstKey() < oldest.windows.firstKey())) {
        oldest = t;
      }
    }
    if (oldest != null) {
      Map.Entry<Long, WindowStats> e = oldest.windows.pollFirstEntry();
      if (oldest.last == e.getValue()) {
        oldest.last = null;
      }
      evicted.add(increment(oldest.name, e.getKey(), e.getValue()));
      open--;
    }
  }

  private Increment increment(String topic, long index, WindowStats stats) {
    long size = config.windowSizeMs;
    long start = saturatingMul(index, size);
    long end = start + size;
    if (((start ^ end) & (size ^ end)) < 0) {
      end = Long.MAX_VALUE;
    }
    return new Increment(topic, start, end, stats);
  }

  private static long saturatingMul(long a, long b) {
    long hi = Math.multiplyHigh(a, b);
    long lo = a * b;
    if ((hi == 0 && lo >= 0) || (hi == -1 && lo < 0)) {
      return lo;
    }
    return (a < 0) == (b < 0) ? Long.MAX_VALUE : Long.MIN_VALUE;
  }

  boolean isEmpty() {
    return open == 0 && evicted.isEmpty();
  }

  /** Everything since the last drain, one increment per (topic, window), in order. */
  List<Increment> drain() {
    Map<String, TreeMap<Long, WindowStats>> all = new HashMap<>();
    for (Increment e : evicted) {
      long index = Math.floorDiv(e.windowStart, config.windowSizeMs);
      all.computeIfAbsent(e.topic, k -> new TreeMap<>()).merge(index, e.stats, (a, b) -> {
        a.merge(b);
        return a;
      });
    }
    evicted.clear();
    for (Topic t : topics.values()) {
      for (Map.Entry<Long, WindowStats> w : t.windows.entrySet()) {
        all.computeIfAbsent(t.name, k -> new TreeMap<>()).merge(w.getKey(), w.getValue(), (a, b) -> {
          a.merge(b);
          return a;
        });
      }
      t.windows.clear();
      t.last = null;
    }
    open = 0;
    String[] names = all.keySet().toArray(new String[0]);
    Arrays.sort(names, (a, b) -> Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8)));
    List<Increment> out = new ArrayList<>();
    for (String name : names) {
      for (Map.Entry<Long, WindowStats> w : all.get(name).entrySet()) {
        w.getValue().sortOffsets();
        out.add(increment(name, w.getKey(), w.getValue()));
      }
    }
    return out;
  }
}
