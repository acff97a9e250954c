"""The Python test client: confluent-kafka from PyPI (its wheel bundles librdkafka and
loads it RTLD_LOCAL), with the plugin added by configuration only.

    client.py produce BOOTSTRAP TOPIC COUNT BASE_MS SPAN_MS PARTITIONS [PROP=VALUE...]
    client.py consume BOOTSTRAP TOPIC GROUP EXPECTED TIMEOUT_S [PROP=VALUE...]

Message i: key k<i>, value {"id":i,"ts":BASE_MS + i*SPAN_MS//COUNT}, partition i %
PARTITIONS (the same messages as client.c and rdkafka_client.rs). Prints one JSON line.
"""
import json
import resource
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def props(args):
    return dict(a.split("=", 1) for a in args)


def produce(bootstrap, topic, count, base, span, partitions, extra):
    count, base, span, partitions = int(count), int(base), int(span), int(partitions)
    result = {"delivered": 0, "failed": 0}

    def delivered(err, _msg):
        result["failed" if err else "delivered"] += 1

    conf = {"bootstrap.servers": bootstrap, **props(extra)}
    size = int(conf.pop("kai.size", 0))  # the value's size: a "pad" field fills it up
    # Every K-th message to a partition the topic has not: its delivery fails.
    fail_every = int(conf.pop("kai.fail_every", 0))
    p = Producer(conf)
    calls = []
    clock = time.perf_counter_ns
    started = clock()
    for i in range(count):
        value = '{"id":%d,"ts":%d}' % (i, base + i * span // count)
        if size > len(value) + 10:
            value = value[:-1] + ',"pad":"%s"}' % ("0" * (size - len(value) - 9))
        partition = i % partitions
        if fail_every and i % fail_every == fail_every - 1:
            partition = partitions
        t0 = clock()
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
        calls.append(clock() - t0)
        p.poll(0)
    p.flush(30)
    result["seconds"] = (clock() - started) / 1e9
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


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    try:
        if mode == "produce":
            produce(*rest[:6], rest[6:])
        elif mode == "consume":
            consume(*rest[:5], rest[5:])
        else:
            sys.exit("usage: see the module docstring")
    except KafkaException as e:
        print(json.dumps({"error": str(e)}))
        sys.exit(2)
