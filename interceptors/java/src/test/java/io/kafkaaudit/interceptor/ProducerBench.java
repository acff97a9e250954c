package io.kafkaaudit.interceptor;

import java.io.IOException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The producer tier's cost (bench/java-producer.sh): the same KafkaProducer settings
 * and messages with and without the interceptor (and, given a jar, with another build
 * of it: "baseline"), in one JVM, rounds rotating which side goes first.
 *
 * <p>Per round and side: (1) throughput: MESSAGES JSON messages of SIZE bytes sent as
 * fast as send() takes them, timed from the first send to the end of flush() (every
 * acknowledgement in), with each thread's CPU time and run-queue wait over exactly that
 * interval (/proc/self/task/N/schedstat: the sending thread, the producer's I/O thread,
 * kafka-audit's reporter, the JVM's GC and compiler threads), the machine's busy time
 * and the broker process's CPU time; (2) send() latency: RATE messages a second for
 * SECONDS, each send() call timed (what the interceptor adds to the application's
 * thread: onSend, the payload read, hash and scan).
 *
 * <pre>ProducerBench BOOTSTRAP BROKER_PID BASELINE_JAR|- MESSAGES ROUNDS RATE SECONDS SIZE...</pre>
 */
public final class ProducerBench {
  private ProducerBench() {}

  public static void main(String[] a) throws Exception {
    String bootstrap = a[0];
    long brokerPid = Long.parseLong(a[1]);
    String baselineJar = a[2];
    long messages = Long.parseLong(a[3]);
    int rounds = Integer.parseInt(a[4]);
    long rate = Long.parseLong(a[5]);
    long seconds = Long.parseLong(a[6]);
    String run = "java-bench-" + ProcessHandle.current().pid() + "-" + System.currentTimeMillis();
    String topic = run;
    String auditTopic = run + "-audit";
    Map<String, Object> sides = new LinkedHashMap<>();
    sides.put("bare", null);
    sides.put("audited", AuditProducerInterceptor.class);
    if (!baselineJar.equals("-")) {
      sides.put("baseline", baselineInterceptor(baselineJar));
    }
    try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
      admin.createTopics(List.of(new NewTopic(topic, 6, (short) 1), new NewTopic(auditTopic, 3, (short) 1))).all().get();
      for (int s = 7; s < a.length; s++) {
        bench(bootstrap, brokerPid, topic, auditTopic, sides, messages, rounds, rate, seconds, Integer.parseInt(a[s]));
      }
      admin.deleteTopics(List.of(topic, auditTopic)).all().get();
    }
  }

  /**
   * The producer interceptor class of another build (a jar of this module): its own
   * classes, kafka-clients' from this JVM's class path.
   */
  static Class<?> baselineInterceptor(String jar) throws Exception {
    URL url = Paths.get(jar).toUri().toURL();
    ClassLoader parent = ProducerBench.class.getClassLoader();
    ClassLoader loader =
        new URLClassLoader(new URL[] {url}, parent) {
          @Override
          protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            if (!name.startsWith("io.kafkaaudit.")) {
              return super.loadClass(name, resolve);
            }
            synchronized (getClassLoadingLock(name)) {
              Class<?> c = findLoadedClass(name);
              if (c == null) {
                c = findClass(name);
              }
              if (resolve) {
                resolveClass(c);
              }
              return c;
            }
          }
        };
    return loader.loadClass(AuditProducerInterceptor.class.getName());
  }

  static Properties props(String bootstrap, String auditTopic, Object interceptor) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("linger.ms", "5");
    p.put("batch.size", "131072");
    if (interceptor != null) {
      p.put("interceptor.classes", List.of(interceptor));
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

  /** A thread's CPU time and time runnable but waiting for a CPU, ns. */
  static final class ThreadTime {
    final String name;
    final long cpu;
    final long wait;

    ThreadTime(String name, long cpu, long wait) {
      this.name = name;
      this.cpu = cpu;
      this.wait = wait;
    }
  }

  /** What the JVM's threads, the machine and the broker had spent by now. */
  static final class Accounting {
    final Map<Long, ThreadTime> threads = new HashMap<>();
    long machineBusy;
    long machineTotal;
    long brokerTicks;

    static Accounting now(long brokerPid) throws IOException {
      Accounting acc = new Accounting();
      try (Stream<Path> tasks = Files.list(Paths.get("/proc/self/task"))) {
        for (Path t : (Iterable<Path>) tasks::iterator) {
          try {
            String[] st = Files.readString(t.resolve("schedstat")).trim().split(" ");
            String name = Files.readString(t.resolve("comm")).trim();
            acc.threads.put(Long.parseLong(t.getFileName().toString()), new ThreadTime(name, Long.parseLong(st[0]), Long.parseLong(st[1])));
          } catch (IOException gone) {
            // the thread ended meanwhile
          }
        }
      }
      String[] cpu = Files.readAllLines(Paths.get("/proc/stat")).get(0).trim().split("\\s+");
      for (int i = 1; i <= 8; i++) {
        long v = Long.parseLong(cpu[i]);
        acc.machineTotal += v;
        if (i != 4 && i != 5) { // idle, iowait
          acc.machineBusy += v;
        }
      }
      if (brokerPid > 0) {
        try {
          String st = Files.readString(Paths.get("/proc/" + brokerPid + "/stat"));
          String[] f = st.substring(st.lastIndexOf(')') + 2).split(" ");
          acc.brokerTicks = Long.parseLong(f[11]) + Long.parseLong(f[12]);
        } catch (IOException | RuntimeException e) {
          acc.brokerTicks = 0;
        }
      }
      return acc;
    }
  }

  /**
   * The sending thread's kernel id: the JVM leaves the main thread's kernel name as the
   * launcher's ("java"), so it is found by id, not name.
   */
  static final long SENDING_TID = sendingTid();

  static long sendingTid() {
    try {
      return Long.parseLong(Files.readSymbolicLink(Paths.get("/proc/thread-self")).getFileName().toString());
    } catch (IOException | RuntimeException e) {
      return -1;
    }
  }

  /** The thread groups reported, by a thread's id and name (Linux keeps 15 characters of it). */
  static String group(long tid, String name) {
    if (tid == SENDING_TID) {
      return "sending";
    }
    if (name.startsWith("kafka-producer-")) {
      return "io";
    }
    if (name.startsWith("kafka-audit")) {
      return "reporter";
    }
    if (name.startsWith("GC ") || name.startsWith("G1 ")) {
      return "gc";
    }
    if (name.startsWith("C1 ") || name.startsWith("C2 ")) {
      return "jit";
    }
    return "other";
  }

  static final String[] GROUPS = {"sending", "io", "reporter", "gc", "jit", "other"};

  static final class Result {
    double rate;
    double cpuNsPerMessage;
    /** CPU ns per message by thread group; the busiest thread's share of a core. */
    final Map<String, Double> byGroup = new LinkedHashMap<>();
    double busiest;
    String busiestName = "";
    double sendingWait;
    double machineBusy;
    double brokerNsPerMessage;
    double p50Us;
    double p99Us;
    double p999Us;
  }

  static Result side(
      String bootstrap, long brokerPid, String topic, String auditTopic, Object interceptor, long messages, long rate, long seconds, int size)
      throws Exception {
    Result r = new Result();
    try (KafkaProducer<String, String> p = new KafkaProducer<>(props(bootstrap, auditTopic, interceptor))) {
      // Warm: metadata, connections, JIT of the send path.
      for (int i = 0; i < 20_000; i++) {
        p.send(new ProducerRecord<>(topic, "k" + i, message(i, size)));
      }
      p.flush();
      AtomicLong failed = new AtomicLong();
      Accounting before = Accounting.now(brokerPid);
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
      Accounting after = Accounting.now(brokerPid);
      if (failed.get() > 0) {
        throw new IllegalStateException(failed.get() + " deliveries failed");
      }
      double wall = t1 - t0;
      r.rate = messages * 1e9 / wall;
      for (String g : GROUPS) {
        r.byGroup.put(g, 0.0);
      }
      long cpu = 0;
      for (Map.Entry<Long, ThreadTime> e : after.threads.entrySet()) {
        ThreadTime t = e.getValue();
        ThreadTime t0s = before.threads.get(e.getKey());
        long dCpu = t.cpu - (t0s == null ? 0 : t0s.cpu);
        long dWait = t.wait - (t0s == null ? 0 : t0s.wait);
        cpu += dCpu;
        String g = group(e.getKey(), t.name);
        r.byGroup.merge(g, (double) dCpu / messages, Double::sum);
        if (dCpu / wall > r.busiest) {
          r.busiest = dCpu / wall;
          r.busiestName = g;
        }
        if (e.getKey() == SENDING_TID) {
          r.sendingWait = dWait / wall;
        }
      }
      r.cpuNsPerMessage = (double) cpu / messages;
      long total = after.machineTotal - before.machineTotal;
      r.machineBusy = total > 0 ? (double) (after.machineBusy - before.machineBusy) / total : 0;
      r.brokerNsPerMessage = (after.brokerTicks - before.brokerTicks) * 1e7 / messages; // 100 ticks a second
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

  static String byGroup(Map<String, Double> m) {
    StringBuilder b = new StringBuilder();
    for (Map.Entry<String, Double> e : m.entrySet()) {
      if (e.getValue() >= 0.5) {
        b.append(b.length() == 0 ? "" : ", ").append(e.getKey()).append(' ').append(Math.round(e.getValue()));
      }
    }
    return b.toString();
  }

  static void bench(
      String bootstrap, long brokerPid, String topic, String auditTopic, Map<String, Object> sides, long messages, int rounds, long rate,
      long seconds, int size)
      throws Exception {
    System.out.printf(
        "== %d B JSON: %d messages per side and round, %d rounds, sides %s; send() latency at %d msg/s for %d s%n",
        size, messages, rounds, sides.keySet(), rate, seconds);
    List<String> names = new ArrayList<>(sides.keySet());
    // A round of each side first, not reported: every send path compiled by the JIT.
    for (String s : names) {
      side(bootstrap, brokerPid, topic, auditTopic, sides.get(s), Math.min(messages, 300_000), rate, 1, size);
    }
    Map<String, List<Result>> results = new LinkedHashMap<>();
    for (String s : names) {
      results.put(s, new ArrayList<>());
    }
    for (int round = 0; round < rounds; round++) {
      List<String> order = new ArrayList<>(names);
      java.util.Collections.rotate(order, -(round % names.size()));
      StringBuilder line = new StringBuilder("round " + round + ":");
      for (String s : order) {
        Result r = side(bootstrap, brokerPid, topic, auditTopic, sides.get(s), messages, rate, seconds, size);
        results.get(s).add(r);
        line.append(String.format(" | %s %.0f msg/s, %.0f ns CPU/msg [%s], send() p99 %.1f us", s, r.rate, r.cpuNsPerMessage, byGroup(r.byGroup), r.p99Us));
      }
      System.out.println(line);
    }
    for (String s : names) {
      List<Result> rs = results.get(s);
      Map<String, Double> by = new LinkedHashMap<>();
      for (String g : GROUPS) {
        List<Double> v = new ArrayList<>();
        rs.forEach(r -> v.add(r.byGroup.get(g)));
        by.put(g, median(v));
      }
      System.out.printf(
          "  %8s: %,.0f msg/s, CPU/msg %.0f ns (%s), busiest thread %.0f%% of a core, sending thread waited %.0f%% of the time for a CPU, machine %.0f%% busy, broker CPU/msg %.0f ns, send() p50/p99/p99.9 %.1f/%.1f/%.1f us%n",
          s,
          median(col(rs, r -> r.rate)),
          median(col(rs, r -> r.cpuNsPerMessage)),
          byGroup(by),
          100 * median(col(rs, r -> r.busiest)),
          100 * median(col(rs, r -> r.sendingWait)),
          100 * median(col(rs, r -> r.machineBusy)),
          median(col(rs, r -> r.brokerNsPerMessage)),
          median(col(rs, r -> r.p50Us)),
          median(col(rs, r -> r.p99Us)),
          median(col(rs, r -> r.p999Us)));
    }
    List<Result> bare = results.get("bare");
    for (String s : names.subList(1, names.size())) {
      List<Result> rs = results.get(s);
      List<Double> ratio = new ArrayList<>();
      List<Double> cpu = new ArrayList<>();
      List<Double> p99 = new ArrayList<>();
      for (int i = 0; i < rounds; i++) {
        ratio.add(rs.get(i).rate / bare.get(i).rate);
        cpu.add(rs.get(i).cpuNsPerMessage / bare.get(i).cpuNsPerMessage);
        p99.add(rs.get(i).p99Us - bare.get(i).p99Us);
      }
      ratio.sort(Double::compare);
      cpu.sort(Double::compare);
      System.out.printf(
          "  %d B %s / bare: median throughput ratio %.3f (rounds %s); CPU/msg ratio median %.3f (%s); send() p99 added %+.1f us (median of rounds)%n",
          size, s, median(ratio), fmt(ratio), median(cpu), fmt(cpu), median(p99));
    }
    if (results.containsKey("baseline")) {
      List<Double> ratio = new ArrayList<>();
      List<Double> cpu = new ArrayList<>();
      for (int i = 0; i < rounds; i++) {
        ratio.add(results.get("audited").get(i).rate / results.get("baseline").get(i).rate);
        cpu.add(results.get("audited").get(i).cpuNsPerMessage / results.get("baseline").get(i).cpuNsPerMessage);
      }
      System.out.printf("  %d B audited / baseline: rate ratio median %.3f; CPU/msg ratio median %.3f (%s)%n", size, median(ratio), median(cpu), fmt(cpu));
    }
    double util = median(col(bare, r -> r.busiest));
    double machine = median(col(bare, r -> r.machineBusy));
    String who = bare.get(bare.size() / 2).busiestName;
    String bound;
    if (util >= 0.9) {
      bound = String.format("its own %s thread (%.0f%% of a core)", who, 100 * util);
    } else if (machine >= 0.9) {
      bound = String.format("the machine (%.0f%% of all CPUs busy; its busiest thread, %s, had %.0f%% of a core)", 100 * machine, who, 100 * util);
    } else {
      bound = String.format("neither its threads (busiest: %s, %.0f%% of a core) nor the machine (%.0f%% busy): the broker or the network", who, 100 * util, 100 * machine);
    }
    System.out.printf("  %d B: the bare producer's rate was bounded by %s%n", size, bound);
  }

  static List<Double> col(List<Result> rs, java.util.function.ToDoubleFunction<Result> f) {
    List<Double> v = new ArrayList<>();
    rs.forEach(r -> v.add(f.applyAsDouble(r)));
    return v;
  }

  static String fmt(List<Double> v) {
    StringBuilder b = new StringBuilder();
    for (double x : v) {
      b.append(b.length() == 0 ? "" : ", ").append(String.format("%.3f", x));
    }
    return b.toString();
  }
}
