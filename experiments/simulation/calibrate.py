#!/usr/bin/env python3
"""Calibrates the host codelets' efficiencies of a machine file on this machine (issue 28 item 2,
docs/simulation.md "Calibration"): per codelet, the measured task time of real runs
(`zenflow-run --trace-csv`, measure.sh's traced runs) against the roofline's prediction at
efficiency 1 (the same task simulated under eager on the machine with every host efficiency 1 and
no per-task overhead), and writes the machine file with `efficiency.host_codelets` (codelet symbol ->
efficiency), `efficiency.cpu_task_overhead_us` and `_by_sched` (the mean gap between consecutive
device tasks), `efficiency.cpu_task_overhead_cold_us` and `cpu_task_cold_bytes` (the gap's extra
after a task that moved more than this CPU's last-level cache), `efficiency.helper_share` and
`efficiency.calibration` (where the numbers come from).

  python3 experiments/simulation/calibrate.py --real-dir DIR --traces gpt-kjv.device-adam ... \
      [--machine graphs/machines/this-machine.json] [--out FILE] [--work DIR]

Each trace NAME is DIR/NAME.zf-deadline.tasks.csv (spec.strategy: the spec gpt-kjv or headline,
measure.sh's) with its run's metrics DIR/NAME.zf-deadline.rtrace.json, and where trace.sh made it
DIR/NAME.eager.tasks.csv, the same run under eager, whose task times (no helper) the codelets'
efficiencies then come from; with several DIRs (several
measurement passes) each trace's tasks are pooled over them (one traced run can catch a slow period
of a shared machine). Needs the simulation build
(bash tools/zf build-sim). Per task name (a layer's op: the same shapes every step) the median of
its measured durations over the measured steps (a median: the machine is shared, a preempted task
is an outlier) and its roofline time; per codelet

    efficiency = sum over its tasks of roofline time at efficiency 1 / sum of measured time,

both sums over every measured task (so the codelet's total time per step is what is matched). A
task's measured time is StarPU's profiling start..end (the codelet's execution); the simulation's
per-task overhead (efficiency.cpu_task_overhead_us) is the time between tasks, not in a task's: it
is measured here too, as the mean gap between a device worker's consecutive tasks over the
device-adam traces' measured steps (device-adam has no host work, so every gap is the runtime's),
zf-deadline's from NAME.zf-deadline.tasks.csv, each other policy's from DIR/NAME.POLICY.tasks.csv
where measure.sh wrote one (`efficiency.cpu_task_overhead_us_by_sched`); the simulation sleeps it,
idle, before each task on a CPU worker.

**Helpers.** Under zf-deadline an idle worker takes tiles of the tiled kernels (docs/architecture.md,
"Device cores"); the simulation models it by dividing a tiled codelet's roofline time by 1 + the
helpers idle when the task starts (docs/simulation.md, "Helpers"; the tiled codelets:
runtime/simulation.cpp's kTiled, read from there). The calibration inverts the same model: a
tiled task's measured time is multiplied by 1 + the number of the run's other workers that ran no
task at its start (the run's workers from its metrics, their tasks from the trace: a host worker
that ran no task, device-adam's, is not in the trace but helped; every worker helps on this machine,
where the workers fit the cores), giving one unhelped core's time. --keep-help leaves the times as
measured (a comparison).
Exit 2 naming the file on bad input."""
import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
SPECS = {"gpt-kjv": os.path.join(root, "graphs/specs/gpt-kjv.json"),
         "headline": os.path.join(root, "experiments/headline/spec.json")}
# measure.sh's per-spec options (steps, warm-up steps left out)
SPEC_ARGS = {"gpt-kjv": ["--steps", "60", "--set", "log.warmup_steps=10"],
             "headline": ["--steps", "200", "--set", "log.warmup_steps=20"]}
WARMUP = {"gpt-kjv": 10, "headline": 20}
TILED = set()
# measure.sh's policies besides zf-deadline: device-adam traced under each gives its per-task overhead
POLICIES = ("eager", "lws", "dmda", "dmdas")


def die(msg):
    print(f"calibrate: error: {msg}", file=sys.stderr)
    sys.exit(2)


def tiled_codelets():
    """runtime/simulation.cpp's kTiled: the codelets whose tiles idle workers share."""
    import re
    src = open(os.path.join(root, "runtime/simulation.cpp")).read()
    m = re.search(r"kTiled\[\] = \{(.*?)\};", src, re.S)
    if not m:
        die("runtime/simulation.cpp: no kTiled list")
    return set(re.findall(r'"(zf_[a-z0-9_]+)"', m.group(1)))


def idle_others(rows, workers):
    """Per row: how many of the run's other workers (`workers` in all, from its metrics: a worker
    that ran no task at all is not in the trace) ran no task at its start."""
    import bisect
    by_worker = defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append((float(r["start_us"]), float(r["end_us"])))
    starts = {}
    for w, iv in by_worker.items():
        iv.sort()
        starts[w] = [a for a, _ in iv]
    out = []
    for r in rows:
        t, busy = float(r["start_us"]), 0
        for w, iv in by_worker.items():
            if w == r["worker"]:
                continue
            i = bisect.bisect_right(starts[w], t) - 1
            if i >= 0 and iv[i][1] > t:
                busy += 1
        out.append(workers - 1 - busy)
    return out


def read_tasks(path, warmup, tiled=None, workers=1, share=0.5):
    """(name, codelet or '') -> (side, codelet, [durations us]) of the tasks of steps >= warmup; with
    `tiled` (the same key -> whether its codelet is tiled) a tiled task's duration times the helpers'
    speed-up, 1 + h share / (1 - share) with h the idle others (runtime/simulation.cpp's inverse).
    Keyed by name and codelet: one name can run two codelets (ZenFlow's `accumulate.W[i]` is a copy
    in the first step of an interval and an accumulation in the others), whose times must not pool."""
    try:
        rows = list(csv.DictReader(open(path)))
    except OSError as e:
        die(f"{path}: {e}")
    if not rows or not {"name", "step", "side", "start_us", "end_us"} <= set(rows[0]):
        die(f"{path}: expected a --trace-csv file (name,category,step,side,worker,start_us,end_us[,codelet])")
    out = {}
    workers = max(workers, len({r["worker"] for r in rows}))
    idle = idle_others(rows, workers) if tiled is not None else [0] * len(rows)
    for r, h in zip(rows, idle):
        try:
            step = int(r["step"])
            d = float(r["end_us"]) - float(r["start_us"])
        except ValueError:
            die(f"{path}: step / start_us / end_us: expected numbers in {r}")
        if step < warmup:
            continue
        key = (r["name"], r.get("codelet") or "")
        e = out.setdefault(key, [r["side"], key[1], []])
        e[2].append(d * (1 + h * share / (1 - share)) if tiled is not None and tiled.get(key) else d)
    return out


def task_bytes(path, warmup):
    """(name, codelet) -> the simulation's memory traffic of the task (bytes, the median over the
    steps >= warmup) from a simulated run's --trace-csv (its sim_bytes column; {} without it)."""
    out = defaultdict(list)
    for r in csv.DictReader(open(path)):
        if r.get("sim_bytes") not in (None, "") and int(r["step"]) >= warmup:
            out[(r["name"], r.get("codelet") or "")].append(float(r["sim_bytes"]))
    return {k: statistics.median(v) for k, v in out.items()}


def llc_bytes():
    """This CPU's last-level cache (bytes): sysfs's highest cache index of cpu0, else lscpu's L3; 0
    where neither says."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        best = (0, 0)
        for d in os.listdir(base):
            if d.startswith("index"):
                level = int(open(os.path.join(base, d, "level")).read())
                size = open(os.path.join(base, d, "size")).read().strip()
                mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:], 1)
                best = max(best, (level, int(size.rstrip("KMG")) * mult))
        if best[1]:
            return best[1]
    except (OSError, ValueError):
        pass
    try:
        for line in subprocess.check_output(["lscpu"], text=True).splitlines():
            if line.startswith("L3 cache:"):  # "32 MiB (1 instance)"
                n, unit = line.split(":", 1)[1].split()[:2]
                return int(float(n) * {"KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}.get(unit, 1))
    except (OSError, ValueError, subprocess.CalledProcessError):
        pass
    return 0


def fit_cold(groups, cold):
    """The runtime's extra time before a task after one that moved more than `cold` bytes (the
    last-level cache): groups = {policy: [(gap us, bytes of the worker's previous task)]}; per
    policy its cold gaps' mean less its other gaps' mean, weighted by the cold gaps' count; at least
    0; 0 where no previous task was that large."""
    num = n = 0.0
    for pts in groups.values():
        c = [g for g, b in pts if b > cold]
        w = [g for g, b in pts if b <= cold]
        if c and w:
            num += len(c) * (statistics.fmean(c) - statistics.fmean(w))
            n += len(c)
    return max(0.0, num / n) if n else 0.0


def device_gaps(path, warmup, nbytes=None):
    """The runtime's time (us) before each of a device worker's tasks of steps >= warmup (but its
    first), with the bytes of memory traffic of the worker's previous task (nbytes: (name,
    codelet) -> bytes, task_bytes(); absent: 0): [(us, bytes)]. The time runs
    from the later of the previous task's end and the task's readiness (the trace's ready_us,
    StarPU's push_end_time: its dependencies met) to its start. That is StarPU's dispatch and the
    worker's wake-up, not a wait for another task (a host AdamW, a transfer): those the simulation
    times itself. A trace without ready_us (older builds) gives the plain gap from one task's end
    to the next one's start, which is the same wherever the device has no host work to wait for
    (device-adam). The tasks are ordered in time before the warm-up's are left out: a later step's
    load task runs among the earlier step's tasks (lookahead), and leaving those out first made one
    false gap of about 100 ms a run."""
    nbytes = nbytes or {}
    by_worker = defaultdict(list)
    for r in csv.DictReader(open(path)):
        if r["side"] == "device":
            ready = float(r["ready_us"]) if r.get("ready_us") not in (None, "") else float("-inf")
            b = nbytes.get((r["name"], r.get("codelet") or ""), 0.0)
            by_worker[r["worker"]].append((float(r["start_us"]), float(r["end_us"]), int(r["step"]), ready, b))
    out = []
    for iv in by_worker.values():
        iv.sort()
        out += [(max(0.0, b[0] - max(a[1], b[3])), a[4]) for a, b in zip(iv, iv[1:]) if min(a[2], b[2]) >= warmup]
    return out


def peak_machine(machine, path):
    """The machine with every host efficiency 1, no per-task overhead and no codelet map: the
    simulated task time is the roofline's at efficiency 1."""
    m = json.loads(json.dumps(machine))
    m["name"] = machine["name"] + "-peak"
    e = m["efficiency"]
    e.update({"host_flops": 1.0, "host_bytes": 1.0, "cpu_task_overhead_us": 0})
    e.pop("host_codelets", None)
    e.pop("cpu_task_overhead_us_by_sched", None)
    e.pop("cpu_task_overhead_cold_us", None)
    e.pop("helper_share", None)
    e.pop("calibration", None)
    with open(path, "w") as f:
        json.dump(m, f, indent=1)


def simulate(spec, strategy, machine_file, csv_path, log_path, sched="eager"):
    """The run's tasks at efficiency 1; under eager, where no helper shares a tile (the same tasks
    and shapes as zf-deadline's)."""
    cmd = ["bash", os.path.join(root, "tools/zf"), "simulate", SPECS[spec], "--machine", machine_file,
           "--strategy", strategy, "--sched", sched, *SPEC_ARGS[spec],
           "--set", "zenflow.full_warm_up_rounds=0", "--set", "log.every=0", "-q", "--trace-csv", csv_path]
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        die(f"simulating {spec} {strategy} failed (exit {rc}, log {log_path})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real-dir", required=True, nargs="+",
                    help="measure.sh's real/ folders: several pool their traces (a traced run can catch a slow period)")
    ap.add_argument("--traces", nargs="+", required=True, help="spec.strategy names (gpt-kjv.zenflow ...)")
    ap.add_argument("--machine", default=os.path.join(root, "graphs/machines/this-machine.json"))
    ap.add_argument("--out", help="the calibrated machine file (default: --machine, rewritten)")
    ap.add_argument("--work", default=os.path.join(here, "out", "calibrate"))
    ap.add_argument("--cpu", help="the CPU the calibration ran on (default: lscpu's model name)")
    ap.add_argument("--keep-help", action="store_true",
                    help="leave tiled tasks' times as measured (the efficiencies then include zf-deadline's "
                         "helpers: a comparison, not the committed calibration)")
    ap.add_argument("--helper-share", choices=("tiles", "speedup"), default="tiles",
                    help="the helper's share s: the tiles device-adam's helper ran (default), or 1 - 1/speed-up "
                         "with the speed-up measured against device-adam's eager trace (README: it predicted the "
                         "step better and the stall worse)")
    a = ap.parse_args()
    try:
        machine = json.load(open(a.machine))
    except (OSError, ValueError) as e:
        die(f"{a.machine}: {e}")
    if int(machine.get("gpus", {}).get("count", 0)) != 0:
        die(f"{a.machine}: gpus.count: expected 0 (the calibration's machine is this host, the CPU device)")
    global TILED
    TILED = tiled_codelets()
    os.makedirs(a.work, exist_ok=True)
    peak_file = os.path.join(a.work, machine["name"] + "-peak.json")
    peak_machine(machine, peak_file)

    # per codelet: sum of roofline time at efficiency 1, sum of measured (unhelped) time, tasks
    roof_sum, meas_sum, ntasks = defaultdict(float), defaultdict(float), defaultdict(int)
    # the share of a tiled kernel's tiles one idle helper runs: device-adam's runs (whose host worker
    # has nothing else to do) if among the traces, else the largest of the traces'
    fractions = defaultdict(list)
    for t in a.traces:
        for d in a.real_dir:
            metrics = os.path.join(d, f"{t}.zf-deadline.rtrace.json")
            try:
                tiles = json.load(open(metrics))["device_tiles"]
                fractions[t].append(tiles["by_helpers"] / tiles["tiles"] if tiles["tiles"] else 0.0)
            except (OSError, ValueError, KeyError, TypeError) as e:
                die(f"{metrics}: device_tiles: {e}")
    da = [f for t, fs in fractions.items() if t.endswith(".device-adam") for f in fs]
    share = statistics.median(da) if da else max(max(fs) for fs in fractions.values())
    share_from = "the share of the tiles device-adam's helper ran"
    # --helper-share speedup, where measure.sh traced device-adam under eager too (no helper): the
    # helper's measured speed-up of the tiled tasks, sigma = their time under eager / under zf-deadline (per task name
    # the median over the steps, summed over the names, pooled over the folders): the tiles one
    # helper runs are not free (the two cores slow each other), so sigma < 1 / (1 - tile share).
    helped, alone, simulated = 0.0, 0.0, set()  # simulated: traces whose run at efficiency 1 is done
    for t in (a.traces if a.helper_share == "speedup" else []):
        spec, _, strategy = t.partition(".")
        if strategy != "device-adam":
            continue
        sim_names = None
        for d in a.real_dir:
            e_csv, z_csv = os.path.join(d, f"{t}.eager.tasks.csv"), os.path.join(d, f"{t}.zf-deadline.tasks.csv")
            if not os.path.exists(e_csv):
                continue
            if sim_names is None:
                sim_csv = os.path.join(a.work, f"{t}.peak.tasks.csv")
                simulate(spec, strategy, peak_file, sim_csv, os.path.join(a.work, f"{t}.peak.log"))
                simulated.add(t)
                sim_names = {n: v[1] in TILED for n, v in read_tasks(sim_csv, WARMUP[spec]).items()}
            ze, zz = read_tasks(e_csv, WARMUP[spec]), read_tasks(z_csv, WARMUP[spec])
            for n, tiled in sim_names.items():
                if tiled and n in ze and n in zz:
                    alone += statistics.median(ze[n][2])
                    helped += statistics.median(zz[n][2])
    if a.helper_share == "speedup" and helped > 0 and alone > helped:
        share, share_from = 1 - helped / alone, (f"device-adam's tiled tasks' time under eager / under zf-deadline = "
                                                 f"{alone / helped:.3f}, s = 1 - 1/that")
    if not 0 < share < 1:
        die(f"the helpers' share of the tiles is {share:.3f}: expected one in (0, 1) (zf-deadline runs with a helper)")
    per_trace, all_gaps, unhelped_from, nbytes = [], [], set(), {}
    for t in a.traces:
        spec, _, strategy = t.partition(".")
        if spec not in SPECS or not strategy:
            die(f"--traces {t}: expected SPEC.STRATEGY with SPEC one of {sorted(SPECS)}")
        sim_csv = os.path.join(a.work, f"{t}.peak.tasks.csv")
        if t not in simulated:
            print(f"calibrate: {t}: simulating at efficiency 1", file=sys.stderr)
            simulate(spec, strategy, peak_file, sim_csv, os.path.join(a.work, f"{t}.peak.log"))
        sim = read_tasks(sim_csv, WARMUP[spec])
        nbytes[t] = task_bytes(sim_csv, WARMUP[spec])
        real, g = {}, []  # pooled over the real/ folders: name -> [side, codelet, durations]
        for d in a.real_dir:
            real_csv = os.path.join(d, f"{t}.zf-deadline.tasks.csv")
            metrics = os.path.join(d, f"{t}.zf-deadline.rtrace.json")
            try:
                mj = json.load(open(metrics))
                workers = int(mj["workers"]["device"]) + int(mj["workers"]["host"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                die(f"{metrics}: workers: {e}")
            # the same run under eager where traced (trace.sh): no helper, so the tasks' times as
            # measured; else zf-deadline's, each tiled task's time turned into one core's (below)
            eager_csv = os.path.join(d, f"{t}.eager.tasks.csv")
            if os.path.exists(eager_csv) and not a.keep_help:
                one = read_tasks(eager_csv, WARMUP[spec])
                unhelped_from.add(os.path.relpath(eager_csv, root))
            else:
                one = read_tasks(real_csv, WARMUP[spec],
                                 None if a.keep_help else {n: v[1] in TILED for n, v in sim.items()}, workers, share)
            missing = sorted(set(one) - set(sim))
            if missing:
                src = eager_csv if os.path.exists(eager_csv) and not a.keep_help else real_csv
                die(f"{src}: tasks (name, codelet) the simulation does not submit: {missing[:5]} (a trace "
                    "without the codelet column is from an older build: trace it again)")
            for name, (side, c, ds) in one.items():
                real.setdefault(name, [side, c, []])[2].extend(ds)
            g += device_gaps(real_csv, WARMUP[spec], nbytes[t])
        f_help = statistics.fmean(fractions[t])
        used = 0
        for name, (side, _, ds) in real.items():
            s_side, codelet, sds = sim[name]
            if not codelet:
                die(f"{sim_csv}: {name}: no codelet column (a simulation build older than the calibration)")
            med = statistics.median(ds)
            roof_sum[codelet] += statistics.median(sds) * len(ds)
            meas_sum[codelet] += med * len(ds)
            ntasks[codelet] += len(ds)
            used += len(ds)
        all_gaps += g  # every strategy's: device_gaps leaves the waits for other tasks out
        per_trace.append({"trace": t, "tasks": used, "helper_tile_fraction": round(f_help, 4),
                          "device_gap_mean_us": round(statistics.fmean(x for x, _ in g), 1) if g else None})

    eff = {c: roof_sum[c] / meas_sum[c] for c in sorted(roof_sum) if meas_sum[c] > 0 and roof_sum[c] > 0}
    cpu = a.cpu
    if not cpu:
        try:
            cpu = next(l.split(":", 1)[1].strip() for l in subprocess.check_output(["lscpu"], text=True).splitlines()
                       if l.startswith("Model name"))
        except (OSError, StopIteration, subprocess.CalledProcessError):
            cpu = "unknown"
    out = json.loads(json.dumps(machine))
    out["efficiency"]["host_codelets"] = {c: round(v, 4) for c, v in eff.items()}
    if not all_gaps:
        die("no device task in --traces: no per-task overhead to measure")
    # the other policies' (trace.sh's traces under each, every strategy's), where present
    by_sched = {}
    for t in a.traces:
        spec, _, strategy = t.partition(".")
        for pol in POLICIES:
            for d in a.real_dir:
                p = os.path.join(d, f"{t}.{pol}.tasks.csv")
                if os.path.exists(p):
                    by_sched.setdefault(pol, []).extend(device_gaps(p, WARMUP[spec], nbytes[t]))
    # the gap is longer after a task that moved more than the last-level cache (the headline's 51
    # MB first layer: 35-74 us after its three such tasks, 8-23 us elsewhere; experiments/
    # simulation/README.md): that extra, then each policy's time without it
    groups = {"zf-deadline": all_gaps, **{pol: g for pol, g in by_sched.items() if g}}
    llc = llc_bytes()
    cold_us = fit_cold(groups, llc) if llc > 0 else 0.0
    measured = {pol: statistics.fmean(x - (cold_us if b > llc > 0 else 0.0) for x, b in g)
                for pol, g in sorted(groups.items())}
    # The simulation's own time between two tasks (StarPU's simulated dispatch: 4-6 us a task here)
    # comes on top of the overhead it sleeps: per policy, device-adam on the calibrated machine
    # with no overhead, its mean gap taken off the measured one (without this, gpt-kjv's stall was
    # over-predicted 1.3-2.2x: experiments/simulation/README.md)
    base = {}
    da = next((t for t in a.traces if t.endswith(".device-adam")), None)
    if da:
        spec = da.partition(".")[0]
        o0 = json.loads(json.dumps(out))
        o0["name"] = machine["name"] + "-o0"
        o0["efficiency"]["cpu_task_overhead_us"] = 0
        o0["efficiency"].pop("cpu_task_overhead_us_by_sched", None)
        o0["efficiency"].pop("cpu_task_overhead_cold_us", None)
        o0["efficiency"]["helper_share"] = round(share, 4)
        o0_file = os.path.join(a.work, o0["name"] + ".json")
        with open(o0_file, "w") as f:
            json.dump(o0, f, indent=1)
        for pol in measured:
            sim_csv = os.path.join(a.work, f"{da}.o0.{pol}.tasks.csv")
            print(f"calibrate: {da}: the simulation's own gaps under {pol}", file=sys.stderr)
            simulate(spec, "device-adam", o0_file, sim_csv, os.path.join(a.work, f"{da}.o0.{pol}.log"), pol)
            g0 = device_gaps(sim_csv, WARMUP[spec])
            base[pol] = statistics.fmean(x for x, _ in g0) if g0 else 0.0
    net = {pol: max(0.0, v - base.get(pol, 0.0)) for pol, v in measured.items()}
    overhead = round(net["zf-deadline"], 1)
    out["efficiency"]["cpu_task_overhead_us"] = overhead
    out["efficiency"]["cpu_task_overhead_us_by_sched"] = {
        pol: round(v, 1) for pol, v in net.items() if pol != "zf-deadline"}
    if llc > 0:
        out["efficiency"]["cpu_task_overhead_cold_us"] = round(cold_us, 1)
        out["efficiency"]["cpu_task_cold_bytes"] = llc
    out["efficiency"]["cpu_task_overhead_measured_us"] = {pol: round(v, 1) for pol, v in measured.items()}
    out["efficiency"]["cpu_task_overhead_simulated_base_us"] = {pol: round(v, 1) for pol, v in base.items()}
    out["efficiency"]["helper_share"] = round(share, 4)
    out["efficiency"]["calibration"] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "cpu": cpu,
        "by": "experiments/simulation/calibrate.py",
        "from": [os.path.join(os.path.relpath(d, root), f"{t}.zf-deadline.tasks.csv")
                 for d in a.real_dir for t in a.traces],
        "traces": per_trace,
        "codelet_times_from_eager": sorted(unhelped_from),
        "method": "per codelet: sum of roofline time at efficiency 1 / sum of measured task time (per task name the "
                  "median over the measured steps, from the run under eager where traced (no helper), else "
                  "zf-deadline's" + ("" if a.keep_help else
                  ", a tiled codelet's task times the helpers' speed-up, 1 + h s / (1 - s), h the workers idle "
                  "at its start, s = helper_share from " + share_from) + "); "
                  "the runtime's time before a device task, from the later of the previous task's end and the "
                  "task's readiness (ready_us) to its start (its dispatch, no wait for another task), over the "
                  "device worker's tasks of the measured steps of every trace; cpu_task_overhead_cold_us: the "
                  "extra after a task whose memory traffic (the simulation's sim_bytes) exceeds this CPU's "
                  "last-level cache (cpu_task_cold_bytes), per policy the mean of such gaps less the mean of the "
                  "others, weighted by their count; cpu_task_overhead_us (zf-deadline) and "
                  "cpu_task_overhead_us_by_sched (the other policies): each policy's mean without that extra "
                  "(cpu_task_overhead_measured_us), less the simulation's own mean time for device-adam at no "
                  "overhead (cpu_task_overhead_simulated_base_us); simulated as idle time before each task",
    }
    dest = a.out or a.machine
    tmp = f"{dest}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, dest)
    print("| codelet | tasks | roofline at 1, ms | measured, ms | efficiency |")
    print("|---|---|---|---|---|")
    for c, v in eff.items():
        print(f"| {c} | {ntasks[c]} | {roof_sum[c] / 1e3:.2f} | {meas_sum[c] / 1e3:.2f} | {v:.3f} |")
    print(f"\nhelper share {share:.4f} (from {share_from})")
    print(f"per-task overhead (the runtime's mean time before a device task, every trace, {len(all_gaps)} tasks): "
          f"zf-deadline {overhead} us, " + ", ".join(f"{p} {v} us" for p, v in
                                                   out["efficiency"]["cpu_task_overhead_us_by_sched"].items()) +
          f"; plus {cold_us:.1f} us after a task that moved more than the {llc / 2**20:.0f} MiB last-level cache")
    print(f"calibrate: wrote {dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
