#!/usr/bin/env python3
"""Prints criterion medians (ns per message) and ratios to the in-run baseline for the
hot_path bench. Run after `cargo bench -p audit-lib --bench hot_path`."""
import json, os, sys

root = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "target")), "criterion")
PER_ITER = 1024  # messages per iteration in every bench of hot_path.rs

import time
STALE_AFTER_S = 3600

def median(group, bench):
    p = os.path.join(root, group, bench, "new", "estimates.json")
    if time.time() - os.path.getmtime(p) > STALE_AFTER_S:
        sys.exit(f"{p} is older than an hour: run the bench first")
    with open(p) as f:
        return json.load(f)["median"]["point_estimate"] / PER_ITER

ok = True
for group, goal in [("extract_100B_ts_first", 10.0), ("extract_1KB_ts_last", 3.0)]:
    base = median(group, "serde_json_one_field_struct")
    for b in ["scanner", "classify"]:
        m = median(group, b)
        r = base / m
        print(f"{group}: serde_json {base:.1f} ns/msg, {b} {m:.1f} ns/msg, ratio {r:.1f}x (goal >= {goal}x)")
        ok &= r >= goal
base = median("record_100B", "serde_json_one_field_struct")
m = median("record_100B", "aggregator_record")
print(f"record_100B: aggregator_record {m:.1f} ns/msg (goal <= 100 ns), serde_json baseline {base:.1f} ns/msg, ratio {base/m:.1f}x")
ok &= m <= 100
base = median("latency_bucket", "formula_ln")
m = median("latency_bucket", "table")
print(f"latency_bucket: table {m:.1f} ns/latency, formula with ln {base:.1f} ns, ratio {base/m:.1f}x")
sys.exit(0 if ok else 1)
