package io.kafkaaudit.interceptor;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The producer tier's cost (bench/java-producer.sh): the same KafkaProducer settings
 * and messages with and without the interceptor, in one JVM, rounds alternating which
 * side goes first.
 *
 * <p>Per round and side: (1) throughput: MESSAGES JSON messages of SIZE bytes sent as
 * fast as send() takes them, timed from the first send to the end of flush() (every
 * acknowledgement in), with the process CPU time spent; (2) send() latency: RATE
 * messages a second for SECONDS, each send() call timed (what the interceptor adds to
 * the application's thread: onSend, the payload read, hash and scan).
 *
 * <pre>ProducerBench BOOTSTRAP MESSAGES ROUNDS RATE SECONDS SIZE...</pre>
 */
public final class ProducerBench {
  private ProducerBench() {}

  private static final com.sun.management.OperatingSystemMXBean OS =
      (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

  public static void main(String[] a) throws Exception {
    String bootstrap = a[0];
    long messages = Long.parseLong(a[1]);
    int rounds = Integer.parseInt(a[2]);
    long rate = Long.parseLong(a[3]);
    long seconds = Long.parseLong(a[4]);
    String run = "java-bench-" + ProcessHandle.current().pid() + "-" + System.currentTimeMillis();
    String topic = run;
    String auditTopic = run + "-audit";
    try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
      admin.createTopics(List.of(new NewTopic(topic, 6, (short) 1), new NewTopic(auditTopic, 3, (short) 1))).all().get();
      for (int s = 5; s < a.length; s++) {
        bench(bootstrap, topic, auditTopic, messages, rounds, rate, seconds, Integer.parseInt(a[s]));
      }
      admin.deleteTopics(List.of(topic, auditTopic)).all().get();
    }
  }

  static Properties props(String bootstrap, String auditTopic, boolean audited) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("linger.ms", "5");
    p.put("batch.size", "131072");
    if (audited) {
      p.put("interceptor.classes", AuditProducerInterceptor.class.getName());
      p.put("kafka_audit.datacenter", "bench");
      p.put("kafka_audit.audit_topic", auditTopic);
      p.put("kafka_audit.report.interval.ms", "1000");
    }
    return p;
  }

  /** A JSON message of about {@code size} bytes with its event time. */
  static String message(long i, int size) {
    String head = "{\"id\":" + i + ",\"ts\":" + System.currentTimeMillis() + ",\"pad\":\"";
    int pad = Math.max(0, size - head.length() - 2);
    char[] fill = new char[pad];
    Arrays.fill(fill, 'x');
    return head + new String(fill) + "\"}";
  }

  static final class Result {
    double rate;
    double cpuNsPerMessage;
    double p50Us;
    double p99Us;
    double p999Us;
    /** CPU per message by thread (sending, I/O, kafka-audit's own), ns. */
    String threads;
  }

  private static final java.lang.management.ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  static Map<String, Long> threadCpu() {
    Map<String, Long> m = new java.util.TreeMap<>();
    for (java.lang.management.ThreadInfo t : THREADS.getThreadInfo(THREADS.getAllThreadIds())) {
      if (t == null) {
        continue;
      }
      String name = t.getThreadName().replaceAll("-\\d+$", "").replaceAll("producer-\\d+", "producer");
      long cpu = THREADS.getThreadCpuTime(t.getThreadId());
      if (cpu > 0) {
        m.merge(name, cpu, Long::sum);
      }
    }
    return m;
  }

  static Result side(String bootstrap, String topic, String auditTopic, boolean audited, long messages, long rate, long seconds, int size)
      throws Exception {
    Result r = new Result();
    try (KafkaProducer<String, String> p = new KafkaProducer<>(props(bootstrap, auditTopic, audited))) {
      // Warm: metadata, connections, JIT of the send path.
      for (int i = 0; i < 20_000; i++) {
        p.send(new ProducerRecord<>(topic, "k" + i, message(i, size)));
      }
      p.flush();
      AtomicLong failed = new AtomicLong();
      Map<String, Long> threads0 = threadCpu();
      long cpu0 = OS.getProcessCpuTime();
      long t0 = System.nanoTime();
      for (long i = 0; i < messages; i++) {
        p.send(new ProducerRecord<>(topic, "k" + i, message(i, size)), (md, e) -> {
          if (e != null) {
            failed.incrementAndGet();
          }
        });
      }
      p.flush();
      long t1 = System.nanoTime();
      long cpu1 = OS.getProcessCpuTime();
      Map<String, Long> threads1 = threadCpu();
      StringBuilder th = new StringBuilder();
      for (Map.Entry<String, Long> e : threads1.entrySet()) {
        long d = e.getValue() - threads0.getOrDefault(e.getKey(), 0L);
        if (d * 20 > cpu1 - cpu0) { // threads with at least 5 % of the CPU
          th.append(th.length() == 0 ? "" : ", ").append(e.getKey()).append(' ').append(d / messages).append(" ns");
        }
      }
      r.threads = th.toString();
      if (failed.get() > 0) {
        throw new IllegalStateException(failed.get() + " deliveries failed");
      }
      r.rate = messages * 1e9 / (t1 - t0);
      r.cpuNsPerMessage = (double) (cpu1 - cpu0) / messages;
      // send() latency at a fixed rate.
      long n = rate * seconds;
      long[] lat = new long[(int) n];
      long start = System.nanoTime();
      for (int i = 0; i < n; i++) {
        long due = start + i * 1_000_000_000L / rate;
        while (System.nanoTime() < due) {
          Thread.onSpinWait();
        }
        ProducerRecord<String, String> rec = new ProducerRecord<>(topic, "k" + i, message(i, size));
        long s = System.nanoTime();
        p.send(rec);
        lat[i] = System.nanoTime() - s;
      }
      p.flush();
      Arrays.sort(lat);
      r.p50Us = lat[(int) (n * 0.50)] / 1e3;
      r.p99Us = lat[(int) (n * 0.99)] / 1e3;
      r.p999Us = lat[(int) (n * 0.999)] / 1e3;
    }
    return r;
  }

  static double median(List<Double> v) {
    List<Double> s = new ArrayList<>(v);
    s.sort(Double::compare);
    int n = s.size();
    return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2;
  }

  static void bench(String bootstrap, String topic, String auditTopic, long messages, int rounds, long rate, long seconds, int size)
      throws Exception {
    System.out.printf("== %d B JSON: %d messages per side and round, %d rounds; send() latency at %d msg/s for %d s%n", size, messages, rounds, rate, seconds);
    // A round of each side first, not reported: both send paths compiled by the JIT.
    side(bootstrap, topic, auditTopic, false, Math.min(messages, 300_000), rate, 1, size);
    side(bootstrap, topic, auditTopic, true, Math.min(messages, 300_000), rate, 1, size);
    List<Double> ratios = new ArrayList<>();
    List<Double> addedP99 = new ArrayList<>();
    List<Double> bareCpu = new ArrayList<>();
    List<Double> auditedCpu = new ArrayList<>();
    for (int round = 0; round < rounds; round++) {
      Result bare;
      Result audited;
      if (round % 2 == 0) {
        bare = side(bootstrap, topic, auditTopic, false, messages, rate, seconds, size);
        audited = side(bootstrap, topic, auditTopic, true, messages, rate, seconds, size);
      } else {
        audited = side(bootstrap, topic, auditTopic, true, messages, rate, seconds, size);
        bare = side(bootstrap, topic, auditTopic, false, messages, rate, seconds, size);
      }
      double ratio = audited.rate / bare.rate;
      ratios.add(ratio);
      addedP99.add(audited.p99Us - bare.p99Us);
      bareCpu.add(bare.cpuNsPerMessage);
      auditedCpu.add(audited.cpuNsPerMessage);
      System.out.printf(
          "round %d (%s first): bare %.0f msg/s, %.0f ns CPU/msg, send() p50/p99/p99.9 %.1f/%.1f/%.1f us | audited %.0f msg/s, %.0f ns CPU/msg, send() %.1f/%.1f/%.1f us | ratio %.3f%n",
          round, round % 2 == 0 ? "bare" : "audited", bare.rate, bare.cpuNsPerMessage, bare.p50Us, bare.p99Us, bare.p999Us,
          audited.rate, audited.cpuNsPerMessage, audited.p50Us, audited.p99Us, audited.p999Us, ratio);
      System.out.printf("  CPU per message by thread: bare [%s] | audited [%s]%n", bare.threads, audited.threads);
    }
    System.out.printf(
        "%d B: median throughput ratio %.3f (rounds %.3f-%.3f); send() p99 added %.1f us (median); CPU/msg bare %.0f ns, audited %.0f ns (medians)%n",
        size, median(ratios), ratios.stream().min(Double::compare).get(), ratios.stream().max(Double::compare).get(),
        median(addedP99), median(bareCpu), median(auditedCpu));
  }
}
