"""The Python test client: confluent-kafka from PyPI (its wheel bundles librdkafka and
loads it RTLD_LOCAL), with the plugin added by configuration only.

    client.py produce BOOTSTRAP TOPIC COUNT BASE_MS SPAN_MS PARTITIONS [PROP=VALUE...]
    client.py consume BOOTSTRAP TOPIC GROUP EXPECTED TIMEOUT_S [PROP=VALUE...]
    client.py harm BOOTSTRAP CASE [PROP=VALUE...]

Message i: key k<i>, value {"id":i,"ts":BASE_MS + i*SPAN_MS//COUNT}, partition i %
PARTITIONS (the same messages as client.c and rdkafka_client.rs). Prints one JSON line.
"""
import json
import os
import resource
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def props(args):
    return dict(a.split("=", 1) for a in args)


def accounting(broker_pid):
    """What the benchmark's accounting needs (bench/interceptor.sh; client.c has the
    same): per thread its name, CPU time and run-queue wait (ns, schedstat); the
    machine's busy and total ticks; the broker process's CPU ticks."""
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu, wait = (int(x) for x in f.read().split()[:2])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        threads[int(tid)] = (name, cpu, wait)
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    broker = 0
    if broker_pid:
        try:
            with open(f"/proc/{broker_pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            broker = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return threads, sum(ticks) - ticks[3] - ticks[4], sum(ticks), broker


def accounting_delta(a, b):
    threads = []
    for tid, (name, cpu, wait) in b[0].items():
        _, cpu0, wait0 = a[0].get(tid, (name, 0, 0))
        threads.append({"name": name, "main": tid == os.getpid(),
                        "cpu_ns": cpu - cpu0, "wait_ns": wait - wait0})
    total = b[2] - a[2]
    return {"threads": threads, "machine_busy": (b[1] - a[1]) / total if total else 0.0,
            "cpus": os.cpu_count(), "broker_cpu_s": (b[3] - a[3]) / os.sysconf("SC_CLK_TCK")}


def produce(bootstrap, topic, count, base, span, partitions, extra):
    count, base, span, partitions = int(count), int(base), int(span), int(partitions)
    result = {"delivered": 0, "failed": 0}

    def delivered(err, _msg):
        result["failed" if err else "delivered"] += 1

    conf = {"bootstrap.servers": bootstrap, **props(extra)}
    size = int(conf.pop("kai.size", 0))  # the value's size: a "pad" field fills it up
    # Every K-th message to a partition the topic has not: its delivery fails.
    fail_every = int(conf.pop("kai.fail_every", 0))
    # Messages a second (default: as fast as produce() takes them).
    rate = float(conf.pop("kai.rate", 0))
    broker_pid = int(conf.pop("kai.broker_pid", 0))
    p = Producer(conf)
    calls = []
    clock = time.perf_counter_ns
    before = accounting(broker_pid)
    started = clock()
    for i in range(count):
        if rate and i % 64 == 0:
            left = started + i * 1e9 / rate - clock()
            if left > 0:
                time.sleep(left / 1e9)
        value = '{"id":%d,"ts":%d}' % (i, base + i * span // count)
        if size > len(value) + 10:
            value = value[:-1] + ',"pad":"%s"}' % ("0" * (size - len(value) - 9))
        partition = i % partitions
        if fail_every and i % fail_every == fail_every - 1:
            partition = partitions
        if rate:
            t0 = clock()  # calls are timed when paced only (two clock reads a message)
        while True:
            try:
                p.produce(topic, value.encode(), key=b"k%d" % i, partition=partition,
                          on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.01)
            except KafkaException:
                if partition != partitions:
                    raise
                result["failed"] += 1  # refused at once: no delivery report comes
                break
        if rate:
            calls.append(clock() - t0)
        p.poll(0)
    p.flush(30)
    result["seconds"] = (clock() - started) / 1e9
    result.update(accounting_delta(before, accounting(broker_pid)))
    del p  # rd_kafka_destroy: the plugin's last report
    ru = resource.getrusage(resource.RUSAGE_SELF)
    calls.sort()
    result.update(cpu_s=ru.ru_utime + ru.ru_stime, produce_calls=len(calls),
                  produce_p50_ns=calls[len(calls) // 2] if calls else 0,
                  produce_p99_ns=calls[len(calls) * 99 // 100] if calls else 0)
    print(json.dumps(result))


def consume(bootstrap, topic, group, expected, timeout, extra):
    """kai.commit_after=M: commit once, after M messages, and never again (a consumer
    that stops before committing the rest)."""
    expected, until = int(expected), time.time() + float(timeout)
    conf = {"bootstrap.servers": bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", **props(extra)}
    commit_after = conf.pop("kai.commit_after", None)
    if commit_after is not None:
        conf["enable.auto.commit"] = "false"
    c = Consumer(conf)
    c.subscribe([topic])
    consumed = 0
    while consumed < expected and time.time() < until:
        m = c.poll(0.2)
        if m is not None and not m.error():
            consumed += 1
            if commit_after is not None and consumed == int(commit_after):
                c.commit(asynchronous=False)
    c.close()  # commits what was read, unless auto commit is off
    del c
    print(json.dumps({"consumed": consumed}))


def harm(case, extra):
    """One case of the fault matrix of the plugin's host (docs/plugin.md), as client.c's
    `harm` (its comment has the cases): produce-batch and failed-new. The plugin's
    stats are read through ctypes (the library librdkafka loaded: it stays mapped)."""
    import ctypes
    conf = props(extra)
    topic = conf.pop("kai.topic", "no-such-topic")
    lib = ctypes.CDLL(conf["plugin.library.paths"])
    lib.kafka_audit_interceptor_stats.restype = ctypes.c_size_t

    def stats():
        size = lib.kafka_audit_interceptor_stats(None, 0) + 1
        buf = ctypes.create_string_buffer(size)
        lib.kafka_audit_interceptor_stats(buf, size)
        return json.loads(buf.value)

    def threads():
        return len(os.listdir("/proc/self/task"))

    result = {}
    if case == "produce-batch":
        first = []
        p = Producer(conf)
        p.produce(topic, b"{}", on_delivery=lambda err, _m: first.append(err))
        until = time.time() + 60
        while not first and time.time() < until:
            p.poll(0.1)
        result["first_err"] = first[0].code() if first and first[0] else 0
        batches = []
        for _ in range(2):
            msgs = [{"value": b'{"id":%d}' % i} for i in range(1000)]
            queued = p.produce_batch(topic, msgs)
            batches.append([queued, sum(1 for m in msgs if "_error" in m)])
        result["batches"] = batches
        p.flush(10)
        del p
    elif case == "failed-new":
        before = threads()
        try:
            Producer(conf)
            result["created"] = True
        except KafkaException as e:
            result.update(created=False, error=str(e))
        import gc
        gc.collect()
        result.update(threads_before=before, threads_after=threads())
    else:
        sys.exit("harm: unknown case " + case)
    result["plugin"] = stats()
    print(json.dumps(result))


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    try:
        if mode == "produce":
            produce(*rest[:6], rest[6:])
        elif mode == "consume":
            consume(*rest[:5], rest[5:])
        elif mode == "harm":
            harm(rest[1], rest[2:])  # rest[0]: the bootstrap servers, as client.c's
        else:
            sys.exit("usage: see the module docstring")
    except KafkaException as e:
        print(json.dumps({"error": str(e)}))
        sys.exit(2)
