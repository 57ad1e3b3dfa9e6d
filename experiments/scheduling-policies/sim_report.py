"""The simulated column of the scheduling-policy study (sim.sh): results.csv (every simulated run),
table.md (the measured CPU figures of run.sh beside the simulated ones, per policy and priority
setting) and summary.md (the table and the comparisons computed from the runs).

usage: sim_report.py OUT MEASURED_RESULTS_CSV MACHINE
Runs are OUT/runs/<strategy>.<policy>.prio-<true|false>.stale-<1|2|na>.sim.json."""
import collections
import csv
import glob
import json
import os
import statistics
import sys

out, measured_csv, machine = sys.argv[1], sys.argv[2], sys.argv[3]
sim = {}  # (strategy, policy, prio, stale) -> metrics
for f in sorted(glob.glob(f"{out}/runs/*.json")):
    strategy, policy, prio, stale, _ = os.path.basename(f)[:-5].split(".")
    sim[(strategy, policy, prio[5:], stale[6:])] = json.load(open(f))
if not sim:
    sys.exit(f"no runs in {out}/runs")
failures = [l.strip() for l in open(f"{out}/failures.txt")] if os.path.exists(f"{out}/failures.txt") else []
refused = [l.strip() for l in open(f"{out}/not-usable.txt")] if os.path.exists(f"{out}/not-usable.txt") else []

# the measured study: medians over its repeats
rows = collections.defaultdict(list)
if os.path.exists(measured_csv):
    for r in csv.DictReader(open(measured_csv)):
        rows[(r["strategy"], r["policy"], r["priorities"], r["max_staleness"])].append(r)
meas = {k: (statistics.median(float(r["median_step_ms"]) for r in v), statistics.median(float(r["stall_fraction"]) for r in v))
        for k, v in rows.items()}

def ms(m, q):
    return 1e3 * m["step_time_s"][q]

with open(f"{out}/results.csv.tmp", "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["machine", "strategy", "policy", "priorities", "max_staleness", "median_step_ms", "mean_step_ms",
                "p90_step_ms", "stall_fraction", "device_busy_ms_per_step", "staleness_mean_steps", "host_updates",
                "workers_device", "workers_host", "sched_reported"])
    for (s, p, pr, st), m in sorted(sim.items()):
        sm = m.get("staleness", {})
        w.writerow([machine, s, p, pr, st, f"{ms(m, 'median'):.4f}", f"{ms(m, 'mean'):.4f}", f"{ms(m, 'p90'):.4f}",
                    f"{m['stall_fraction']:.4f}", f"{1e3 * m['device_busy_s_per_step']:.4f}", sm.get("mean", ""),
                    m.get("host_updates", ""), m["workers"]["device"], m["workers"]["host"], m["sched"]])
os.replace(f"{out}/results.csv.tmp", f"{out}/results.csv")

settings = sorted({(k[1], k[2]) for k in sim})
Z1 = lambda p, pr: ("zenflow", p, pr, "1")

def sim_key(p, pr):  # H200 order: zenflow s=1 stall, then its mean step
    m = sim.get(Z1(p, pr))
    return (m["stall_fraction"], m["step_time_s"]["mean"]) if m else (9, 9)

def meas_key(p, pr):
    v = meas.get(Z1(p, pr))
    return v[1] if v else 9

def ranks(keyf):
    """1-based ranks of the settings by keyf, ties sharing their mean rank."""
    order = sorted(settings, key=keyf)
    r, i = {}, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and keyf(order[j + 1]) == keyf(order[i]):
            j += 1
        for k in order[i:j + 1]:
            r[k] = (i + j) / 2 + 1
        i = j + 1
    return r

both = [s for s in settings if Z1(*s) in sim and Z1(*s) in meas]
r_sim = ranks(lambda s: sim_key(*s))
r_meas = ranks(lambda s: meas_key(*s))
settings.sort(key=lambda s: sim_key(*s))

def mcell(k):
    v = meas.get(k)
    return f"{v[0]:.1f} / {v[1]:.3f}" if v else "-"

def scell(k):
    m = sim.get(k)
    return f"{ms(m, 'median'):.2f} / {ms(m, 'mean'):.2f} / {m['stall_fraction']:.3f}" if m else "failed"

lines = ["| policy | priorities | rank CPU / H200 | zenflow s=1 CPU | zenflow s=1 H200 | zenflow s=2 CPU | zenflow s=2 H200 | "
         "zero-offload CPU | zero-offload H200 |", "|---|---|---|---|---|---|---|---|---|"]
for p, pr in settings:
    rk = f"{r_meas[(p, pr)]:g} / {r_sim[(p, pr)]:g}" if (p, pr) in both else "-"
    lines.append(f"| {p} | {'on' if pr == 'true' else 'off'} | {rk} | " + " | ".join(
        f(k) for st, s in (("1", "zenflow"), ("2", "zenflow"), ("na", "zero-offload"))
        for k in [(s, p, pr, st)] for f in (mcell, scell)) + " |")
table = "\n".join(lines)
open(f"{out}/table.md.tmp", "w").write(table + "\n")
os.replace(f"{out}/table.md.tmp", f"{out}/table.md")
print(table)

# ---- comparisons, computed
notes = []
# failures grouped by policy: its runs (strategy, priorities, staleness) and their distinct messages
byp = collections.defaultdict(list)
for l in failures:
    tag, msg = l.split(": ", 1)
    byp[tag.split(".")[1]].append(msg.strip())
notes.append(f"- {len(sim)} simulated runs on {machine}; failed or timed out: {len(failures)}"
             + (": " + "; ".join(f"{p}, all {len(v)} of its runs" if len(v) == 6 else f"{p}, {len(v)} runs"
                                  for p, v in sorted(byp.items())) if failures else "") + ".")
for p, v in sorted(byp.items()):
    notes.append(f"  {p}: " + " / ".join(sorted(set(v))))
if refused:
    notes.append("- left out, refused by zenflow-run (as in the measured study): " + "; ".join(refused))
w = {(m["workers"]["device"], m["workers"]["host"]) for m in sim.values()}
notes.append(f"- workers (device, host) in the runs: {sorted(w)}.")
for s, st in (("zenflow", "1"), ("zenflow", "2"), ("zero-offload", "na")):
    ks = [k for k in sim if k[0] == s and k[3] == st]
    if not ks:
        continue
    stall = [sim[k]["stall_fraction"] for k in ks]
    med = [ms(sim[k], "median") for k in ks]
    mean = [ms(sim[k], "mean") for k in ks]
    best = min(ks, key=lambda k: (sim[k]["stall_fraction"], sim[k]["step_time_s"]["mean"]))
    nbest = sum(1 for k in ks if sim[k]["stall_fraction"] == sim[best]["stall_fraction"])
    notes.append(f"- {s}{'' if st == 'na' else ', max_staleness ' + st} on {machine}, over {len(ks)} policy x priority "
                 f"settings: stall {min(stall):.3f}-{max(stall):.3f}, median step {min(med):.3f}-{max(med):.3f} ms, "
                 f"mean step {min(mean):.3f}-{max(mean):.3f} ms; lowest stall under {best[1]} priorities "
                 f"{'on' if best[2] == 'true' else 'off'} ({sim[best]['stall_fraction']:.3f}"
                 f"{f', shared by {nbest} settings' if nbest > 1 else ''}).")
    mk = [k for k in ks if k in meas]
    if mk:
        mbest = min(mk, key=lambda k: meas[k][1])
        notes.append(f"  Measured on the CPU device the lowest median stall was under {mbest[1]} priorities "
                     f"{'on' if mbest[2] == 'true' else 'off'} ({meas[mbest][1]:.3f}); on {machine} that setting "
                     f"predicts {sim[mbest]['stall_fraction']:.3f}.")
if len(both) > 2:
    n = len(both)
    xs, ys = [r_meas[s] for s in both], [r_sim[s] for s in both]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    den = (sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys)) ** 0.5
    rho = cov / den if den else float("nan")
    notes.append(f"- ranking of the {n} settings by zenflow's stall at max_staleness 1, measured CPU device against "
                 f"{machine}: Spearman rank correlation {rho:+.2f} (ties share their mean rank).")
sp = []
for p, pr in settings:
    o, z = sim.get(("zero-offload", p, pr, "na")), sim.get(Z1(p, pr))
    if o and z:
        sp.append((o["step_time_s"]["mean"] / z["step_time_s"]["mean"], p, pr))
if sp:
    lo, hi = min(sp), max(sp)
    notes.append(f"- zenflow (max_staleness 1) over zero-offload on {machine}, ratio of mean step times: "
                 f"{lo[0]:.2f}x ({lo[1]} {'on' if lo[2] == 'true' else 'off'}) to {hi[0]:.2f}x "
                 f"({hi[1]} {'on' if hi[2] == 'true' else 'off'}).")
pd = []
for p in sorted({k[1] for k in sim}):
    on, off = sim.get(Z1(p, "true")), sim.get(Z1(p, "false"))
    if on and off:
        pd.append(on["stall_fraction"] - off["stall_fraction"])
if pd:
    notes.append(f"- priorities on minus off, zenflow's stall at max_staleness 1 on {machine}: {min(pd):+.3f} to "
                 f"{max(pd):+.3f} over {len(pd)} policies ({sum(1 for d in pd if d == 0)} exactly 0).")
bad = sorted({(k[1], m["sched"]) for k, m in sim.items() if k[1] != m["sched"]})
notes.append(f"- every run reported the policy it asked for: {'yes' if not bad else 'no: ' + str(bad)}.")

text = (f"# Scheduling policies, simulated on {machine}: summary\n\n"
        "Cells: measured CPU device (run.sh, median over its repeats): median step ms / median stall; simulated "
        f"{machine} (sim.sh, one deterministic run): median step ms / mean step ms / stall fraction. Rank: by zenflow's "
        "stall at max_staleness 1 (simulated ties broken by the mean step; measured from out/results.csv).\n\n"
        + table + "\n\n## Comparisons (computed from the runs)\n\n" + "\n".join(notes) + "\n")
open(f"{out}/summary.md.tmp", "w").write(text)
os.replace(f"{out}/summary.md.tmp", f"{out}/summary.md")
print("\n".join(notes))
