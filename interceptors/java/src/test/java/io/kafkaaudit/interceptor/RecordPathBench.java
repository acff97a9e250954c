package io.kafkaaudit.interceptor;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.Blackhole;

/**
 * The producer interceptor's per-record path, without a broker, in ns per record
 * (JMH; bench/java-producer.sh --micro runs it), each phase on the thread Kafka runs it
 * on, with the producer's own work on the same record as the scale:
 *
 * <ul>
 *   <li>{@code serialize}: what the producer itself does with the record on the
 *       sending thread before the interceptor's cost matters: StringSerializer's bytes
 *       of key and value (the baseline);
 *   <li>{@code onSend}: the interceptor on the sending thread (the payload's bytes,
 *       hash, event-time scan, the record handed on);
 *   <li>{@code onAcknowledgement}: the interceptor on the producer's I/O thread, for
 *       records sent a batch earlier (out of the cache, as in a producer);
 *   <li>{@code count}: the reporter's thread counting those acknowledgements.
 * </ul>
 *
 * Batches of {@link #BATCH} records, one less than the interceptor's chunk of
 * acknowledgements, so no chunk goes to the reporter's thread during a measurement; JMH
 * reports the time per record.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 4, time = 1)
@Measurement(iterations = 6, time = 1)
@Fork(value = 1, jvmArgs = {"-Xms512m", "-Xmx512m"})
public class RecordPathBench {
  static final int BATCH = 4095;
  /** Records in all: beyond the caches, as the acknowledged ones are. */
  static final int RECORDS = 16 * (BATCH + 1);

  /** The interceptor and the records, shared by the phases' states. */
  @State(Scope.Thread)
  public static class Records {
    @Param({"100", "1000"})
    public int size;

    AuditProducerInterceptor<String, String> interceptor;
    final StringSerializer serializer = new StringSerializer();
    ProducerRecord<String, String>[] records;
    ProducerRecord<String, String>[] sent;
    RecordMetadata[] metadata;
    private int batch;

    @Setup(Level.Trial)
    @SuppressWarnings({"unchecked", "rawtypes"})
    public void setup() {
      Map<String, Object> c = new HashMap<>();
      c.put("bootstrap.servers", "127.0.0.1:9");
      c.put("client.id", "bench-" + System.nanoTime());
      c.put("kafka_audit.datacenter", "bench");
      c.put("kafka_audit.report.interval.ms", "3600000");
      c.put("key.serializer", StringSerializer.class.getName());
      c.put("value.serializer", StringSerializer.class.getName());
      interceptor = new AuditProducerInterceptor<>();
      interceptor.configure(c);
      records = new ProducerRecord[RECORDS];
      sent = new ProducerRecord[RECORDS];
      metadata = new RecordMetadata[RECORDS];
      long t0 = System.currentTimeMillis();
      TopicPartition[] tps = {new TopicPartition("bench", 0), new TopicPartition("bench", 1), new TopicPartition("bench", 2)};
      for (int i = 0; i < RECORDS; i++) {
        String value = ProducerBench.message(i, size);
        String key = "k" + i;
        records[i] = new ProducerRecord<>("bench", key, value);
        metadata[i] =
            new RecordMetadata(
                tps[i % 3], i / 3, 0, t0 + i, key.length(), value.getBytes(StandardCharsets.UTF_8).length);
      }
    }

    @TearDown(Level.Trial)
    public void close() {
      interceptor.close();
    }

    /** The next batch's first record: successive invocations walk all of them. */
    int nextBatch() {
      batch = (batch + 1) % (RECORDS / (BATCH + 1));
      return batch * (BATCH + 1);
    }

    void send(int from) {
      for (int i = from; i < from + BATCH; i++) {
        sent[i] = interceptor.onSend(records[i]);
      }
    }

    void acknowledge(int from) {
      for (int i = from; i < from + BATCH; i++) {
        interceptor.onAcknowledgement(metadata[i], null, sent[i].headers());
      }
    }
  }

  /** The next batch, sent (so that its acknowledgements find what onSend read). */
  @State(Scope.Thread)
  public static class Sent {
    Records r;
    int from;

    @Setup(Level.Invocation)
    public void send(Records r) {
      this.r = r; // (the benchmark method's own Records parameter would be another instance)
      from = r.nextBatch();
      r.send(from);
      r.interceptor.countPending(); // what the previous invocation acknowledged
    }
  }

  /** The next batch, sent and acknowledged: its counting is left. */
  @State(Scope.Thread)
  public static class Acknowledged {
    Records r;

    @Setup(Level.Invocation)
    public void acknowledge(Records r) {
      this.r = r;
      int from = r.nextBatch();
      r.send(from);
      r.interceptor.countPending();
      r.acknowledge(from);
    }
  }

  @Benchmark
  @OperationsPerInvocation(BATCH)
  public void serialize(Records r, Blackhole bh) {
    int from = r.nextBatch();
    for (int i = from; i < from + BATCH; i++) {
      ProducerRecord<String, String> rec = r.records[i];
      bh.consume(r.serializer.serialize(rec.topic(), rec.key()));
      bh.consume(r.serializer.serialize(rec.topic(), rec.value()));
    }
  }

  @Benchmark
  @OperationsPerInvocation(BATCH)
  public void onSend(Records r) {
    r.send(r.nextBatch());
  }

  @Benchmark
  @OperationsPerInvocation(BATCH)
  public void onAcknowledgement(Sent s) {
    s.r.acknowledge(s.from);
  }

  @Benchmark
  @OperationsPerInvocation(BATCH)
  public void count(Acknowledged a) {
    a.r.interceptor.countPending();
  }
}
