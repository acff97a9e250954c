"""The report of bench/interceptor.sh: reads the runs' JSON lines (one per run:
"<round> <side> <phase> <json>", the client's output) and prints, per phase, the
median of each side's figures and the ratios against the bare producer, round by
round (each round ran every side once, in rotating order).

    interceptor_report.py RUNS_FILE CLIENT SIZE MESSAGES

Throughput phase: messages as fast as produce() takes them. Rate = messages / time
from the first produce() to the end of flush(); CPU per message from each thread's
schedstat over the same interval (the plugin's own thread included; the audit
producer's threads are not there yet: the first report comes after the run); "bound"
says what limited the bare producer: a thread of its own at >= 90 % of a core, the
machine (>= 90 % of all CPUs busy), or neither (the broker, or the network).
Paced phase: a fixed rate both sides keep up with; CPU per message at the same
offered load, and produce()'s p99 (no queue-full waits at this rate).
"""
import json
import statistics
import sys

path, client, size, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = {}  # phase -> round -> side -> result
for line in open(path):
    r, side, phase, js = line.split(" ", 3)
    d = json.loads(js)
    if d.get("delivered") != n or d.get("failed") != 0:
        sys.exit(f"{client} {size} B round {r} {side} {phase}: not all delivered: {js}")
    runs.setdefault(phase, {}).setdefault(int(r), {})[side] = d

GROUPS = ("app", "broker", "main", "plugin", "other")


def group(t):
    if t["main"]:
        return "app"
    name = t["name"]
    if name.startswith("rdk:broker"):
        return "broker"  # librdkafka's per-broker threads: they build and send requests
    if name == "rdk:main":
        return "main"
    if name.startswith("kafka-audit"):
        return "plugin"
    return "other"


def figures(d):
    """CPU ns per message by thread group, busiest thread's share of a core, the app
    thread's run-queue wait per second, etc."""
    cpu = dict.fromkeys(GROUPS, 0.0)
    busiest = (0.0, "")
    app_wait = 0.0
    for t in d["threads"]:
        g = group(t)
        cpu[g] += t["cpu_ns"] / n
        util = t["cpu_ns"] / 1e9 / d["seconds"]
        if util > busiest[0]:
            busiest = (util, "app" if t["main"] else t["name"])
        if t["main"]:
            app_wait = t["wait_ns"] / 1e9 / d["seconds"]
    return {
        "rate": n / d["seconds"],
        "cpu": sum(cpu.values()),
        "by": cpu,
        "busiest": busiest,
        "app_wait": app_wait,
        "machine": d["machine_busy"],
        "broker_cpu": d["broker_cpu_s"] / n * 1e9,
        "p99": d["produce_p99_ns"] / 1e3,
        "p50": d["produce_p50_ns"] / 1e3,
    }


def med(xs):
    return statistics.median(xs)


def fmt_by(f):
    return ", ".join(f"{g} {f['by'][g]:.0f}" for g in GROUPS if f["by"][g] >= 0.5)


label = {"bare": "bare", "plugin": "plugin", "base": "baseline plugin"}
for phase in ("max", "paced"):
    rounds = runs.get(phase)
    if not rounds:
        continue
    sides = [s for s in ("bare", "plugin", "base") if all(s in v for v in rounds.values())]
    fig = {s: [figures(v[s]) for v in rounds.values()] for s in sides}
    title = "as fast as produce() takes them" if phase == "max" else "at a fixed rate"
    print(f"  {client} {size} B, {title} ({len(rounds)} rounds):")
    for s in sides:
        fs = fig[s]
        by = {g: med([f["by"][g] for f in fs]) for g in GROUPS}
        line = (f"    {label[s]:>15}: {med([f['rate'] for f in fs]):>11,.0f} msg/s, "
                f"CPU/msg {med([f['cpu'] for f in fs]):,.0f} ns ({fmt_by({'by': by})}), "
                f"busiest thread {med([f['busiest'][0] for f in fs]):.0%} of a core, "
                f"app thread waited {med([f['app_wait'] for f in fs]):.0%} of the time for a CPU, "
                f"machine {med([f['machine'] for f in fs]):.0%} busy, "
                f"broker CPU/msg {med([f['broker_cpu'] for f in fs]):,.0f} ns")
        if phase == "paced":
            line += (f", produce() p50/p99 {med([f['p50'] for f in fs]):.2f}/"
                     f"{med([f['p99'] for f in fs]):.2f} us")
        print(line)
    for s in sides[1:]:
        pairs = list(zip(fig["bare"], fig[s]))
        rate = sorted(p["rate"] / b["rate"] for b, p in pairs)
        cpu = sorted(p["cpu"] / b["cpu"] for b, p in pairs)
        p99 = med([p["p99"] - b["p99"] for b, p in pairs])
        what = "throughput ratio" if phase == "max" else "rate ratio (both paced)"
        added = f"; produce() p99 added {p99:+.2f} us (median of rounds)" if phase == "paced" else ""
        print(f"    {label[s]} / bare: {what} median {med(rate):.3f} "
              f"(rounds {', '.join(f'{x:.3f}' for x in rate)}); "
              f"CPU/msg ratio median {med(cpu):.3f} ({', '.join(f'{x:.2f}' for x in cpu)})"
              f"{added}")
    if "base" in sides:
        pairs = list(zip(fig["base"], fig["plugin"]))
        rate = sorted(p["rate"] / b["rate"] for b, p in pairs)
        cpu = sorted(p["cpu"] / b["cpu"] for b, p in pairs)
        print(f"    plugin / baseline plugin: rate ratio median {med(rate):.3f}; "
              f"CPU/msg ratio median {med(cpu):.3f} ({', '.join(f'{x:.2f}' for x in cpu)})")
    if phase == "max":
        fs = fig["bare"]
        util = med([f["busiest"][0] for f in fs])
        machine = med([f["machine"] for f in fs])
        who = statistics.mode([f["busiest"][1] for f in fs])
        if util >= 0.9:
            bound = f"its own {who} thread ({util:.0%} of a core)"
        elif machine >= 0.9:
            bound = (f"the machine ({machine:.0%} of all CPUs busy; its busiest thread, "
                     f"{who}, had {util:.0%} of a core)")
        else:
            bound = (f"neither its threads (busiest: {who}, {util:.0%} of a core) nor the "
                     f"machine ({machine:.0%} busy): the broker or the network")
        print(f"    the bare producer's rate was bounded by {bound}")
