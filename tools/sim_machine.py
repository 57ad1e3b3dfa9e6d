#!/usr/bin/env python3
"""A simulated machine for zenflow-run-sim (docs/simulation.md): reads graphs/machines/NAME.json and
writes, under OUT (StarPU's STARPU_PERF_MODEL_DIR for the run, with STARPU_HOSTNAME=NAME):
  bus/NAME.platform.v4.xml   SimGrid platform: MAIN, CPU0..n-1, CUDA0..g-1 (memsize), RAM, and one
                             link per direction between RAM and each GPU and between GPUs
  bus/NAME.bandwidth, .latency   the same links as StarPU's schedulers read them (MB/s, us)
  NAME.roofline              the codelets' roofline (runtime/simulation.cpp): effective FLOP/s,
                             B/s and per-task overhead of a CPU worker and of a CUDA worker (its
                             fp32 and its bf16 FLOP/s: precision bf16's products), their peaks, the calibrated per-codelet efficiencies (efficiency.host_codelets,
                             efficiency.gpu_codelets: codelet symbol -> efficiency, replacing the
                             generic ones for that codelet), and the links the collectives' ring
                             formula uses (GPU-GPU, host MPI)
  NAME.env                   the run's environment (worker counts, ranks)
Every rate is peak x the efficiency stated in the machine file; nothing is fitted here (the
per-codelet efficiencies are measured by experiments/simulation/calibrate.py).
With --ranks R (data parallelism, docs/simulation.md): the run is one rank of R, one GPU each
(R <= gpus.count), and the host's cores are shared: the rank gets cores // R of them. GPUs behind
one PCIe uplink (pcie.gpus_per_uplink, DGX A100's pairs) share its bandwidth with the other ranks'
GPUs there (ranks take GPUs 0, 1, ... in order, and move their data at the same time). Above the
build's MAX_CPUS cores a simulated CPU worker stands for several cores (their summed rates).
Usage: python3 tools/sim_machine.py graphs/machines/NAME.json OUT [--ranks R]
Exit status 2 with the file and field named on a bad machine file."""
import json
import os
import re
import sys

MAX_NODES = 32  # columns of StarPU's bus matrices (STARPU_MAXNODES of the simulation build)
MAX_CPUS = 64   # STARPU_MAXCPUS of the simulation build (tools/build-starpu.sh --simgrid)
MAX_GPUS = 8    # STARPU_MAXCUDADEVS
# Collectives between host processes (the CPU-only all-reduces: the clip's sums, fp16's flag; every
# collective on a machine without GPUs) are MPI over shared memory: one core copies at its
# effective stream rate; the latency is an ASSUMED round number (Open MPI's shared-memory latency is
# of the order of a microsecond), not measured here.
HOST_MPI_LATENCY_S = 1e-6


class BadMachine(Exception):
    pass


def num(obj, path, key, lo=0.0):
    where = f"{path}.{key}" if path else key
    v = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= lo:
        raise BadMachine(f"{where}: expected a number >= {lo:g}, got {json.dumps(v)}")
    return float(v)


def load(path):
    try:
        with open(path) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        raise BadMachine(f"cannot read: {e}")
    if not isinstance(m, dict) or not isinstance(m.get("name"), str):
        raise BadMachine("name: expected a string")
    for k in ("gpus", "host", "efficiency"):
        if not isinstance(m.get(k), dict):
            raise BadMachine(f"{k}: expected an object")
    return m


def rates(m):
    """The roofline of a CPU worker and a CUDA worker: effective FLOP/s, B/s, overhead (us)."""
    h, e, g = m["host"], m["efficiency"], m["gpus"]
    cores = int(num(h, "host", "cores", 1))
    # a core streams at its own rate unless the cores together exceed the host's bandwidth
    core_bytes = min(num(h, "host", "core_bandwidth"), num(h, "host", "memory_bandwidth") / cores)
    r = {
        "cpu.flops": num(h, "host", "core_flops") * num(e, "efficiency", "host_flops"),
        "cpu.bytes": core_bytes * num(e, "efficiency", "host_bytes"),
        "cpu.overhead_us": num(e, "efficiency", "cpu_task_overhead_us"),
        "cuda.flops": 0.0, "cuda.bf16_flops": 0.0, "cuda.bytes": 0.0, "cuda.overhead_us": 0.0,
    }
    # per StarPU policy where measured (calibrate.py): its runtime's time between two tasks
    by_sched = e.get("cpu_task_overhead_us_by_sched", {})
    if not isinstance(by_sched, dict):
        raise BadMachine("efficiency.cpu_task_overhead_us_by_sched: expected an object (policy -> us)")
    for pol in sorted(by_sched):
        if not re.fullmatch(r"[A-Za-z0-9_-]+", pol):
            raise BadMachine(f"efficiency.cpu_task_overhead_us_by_sched: {json.dumps(pol)}: expected a policy name")
        r[f"cpu.overhead_us.{pol}"] = num(by_sched, "efficiency.cpu_task_overhead_us_by_sched", pol)
    # and after a task that moved more than the last-level cache (calibrate.py; absent: none)
    if "cpu_task_overhead_cold_us" in e:
        r["cpu.overhead_cold_us"] = num(e, "efficiency", "cpu_task_overhead_cold_us")
        r["cpu.cold_bytes"] = num(e, "efficiency", "cpu_task_cold_bytes", 1)
    r["cpu.peak.flops"], r["cpu.peak.bytes"] = num(h, "host", "core_flops"), core_bytes
    # the most zf-deadline's helpers speed up a kernel's memory traffic: the cores together stream
    # at most the host's bandwidth, one core alone at its own (docs/simulation.md, "Helpers")
    r["cpu.helper_bytes_speedup"] = max(1.0, num(h, "host", "memory_bandwidth") / num(h, "host", "core_bandwidth"))
    # the share of a tiled kernel's tiles one idle helper runs (calibrate.py measures it; absent:
    # an even split)
    if "helper_share" in e:
        r["cpu.helper_share"] = num(e, "efficiency", "helper_share", 1e-9)
        if not r["cpu.helper_share"] < 1:
            raise BadMachine(f"efficiency.helper_share: expected a share in (0, 1), got {r['cpu.helper_share']}")
    r["cuda.peak.flops"], r["cuda.peak.bf16_flops"], r["cuda.peak.bytes"] = 0.0, 0.0, 0.0
    if int(num(g, "gpus", "count")) > 0:
        # fp32 products (cuBLAS SGEMM) and precision bf16's (cublasGemmEx on the tensor cores)
        r["cuda.flops"] = num(g, "gpus", "fp32_flops") * num(e, "efficiency", "gpu_flops")
        r["cuda.bf16_flops"] = num(g, "gpus", "bf16_flops") * num(e, "efficiency", "gpu_flops")
        r["cuda.peak.bf16_flops"] = num(g, "gpus", "bf16_flops")
        r["cuda.bytes"] = num(g, "gpus", "memory_bandwidth") * num(e, "efficiency", "gpu_bytes")
        r["cuda.overhead_us"] = num(e, "efficiency", "gpu_task_overhead_us")
        r["cuda.peak.flops"] = num(g, "gpus", "fp32_flops")
        r["cuda.peak.bytes"] = num(g, "gpus", "memory_bandwidth")
    # calibrated per-codelet efficiencies (experiments/simulation/calibrate.py): both of a codelet's
    # rates are the peaks x its efficiency
    for key, dev in (("host_codelets", "cpu"), ("gpu_codelets", "cuda")):
        if key not in e:
            continue
        cm = e[key]
        if not isinstance(cm, dict):
            raise BadMachine(f"efficiency.{key}: expected an object (codelet symbol -> efficiency)")
        for sym in sorted(cm):
            if not re.fullmatch(r"zf_[A-Za-z0-9_]+", sym):
                raise BadMachine(f"efficiency.{key}: {json.dumps(sym)}: expected a codelet symbol zf_<op>")
            r[f"{dev}.efficiency.{sym}"] = num(cm, f"efficiency.{key}", sym, 1e-9)
    return cores, r


def links(m, ranks=1):
    """(src, dst) -> (bytes/s, latency s) over nodes 0 = RAM, 1..g = the GPUs, for one rank of R."""
    g = int(num(m["gpus"], "gpus", "count"))
    out = {}
    if g == 0:
        return g, out
    p, gl, e = m.get("pcie"), m.get("gpu_links"), m["efficiency"]
    if not isinstance(p, dict) or not isinstance(gl, dict):
        raise BadMachine("pcie, gpu_links: expected objects (a machine with GPUs)")
    eff = num(e, "efficiency", "pcie")
    # GPU to GPU: through the host's PCIe (its efficiency), or NVLink through NVSwitches (NVLink's)
    through = gl.get("through", "host")
    if through not in ("host", "nvswitch"):
        raise BadMachine(f"gpu_links.through: expected \"host\" or \"nvswitch\", got {json.dumps(through)}")
    geff = eff if through == "host" else num(e, "efficiency", "nvlink")
    # the ranks' GPUs sharing an uplink move their data at once: each gets its share of it
    share = min(ranks, uplink_gpus(p))
    for i in range(1, g + 1):
        out[(0, i)] = (num(p, "pcie", "h2d_bandwidth") * eff / share, num(p, "pcie", "h2d_latency_s"))
        out[(i, 0)] = (num(p, "pcie", "d2h_bandwidth") * eff / share, num(p, "pcie", "d2h_latency_s"))
        for j in range(1, g + 1):
            if i != j:
                out[(i, j)] = (num(gl, "gpu_links", "bandwidth") * geff, num(gl, "gpu_links", "latency_s"))
    return g, out


def uplink_gpus(p):
    """pcie.gpus_per_uplink: GPUs behind one PCIe uplink to the host (1 when absent)."""
    v = p.get("gpus_per_uplink", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise BadMachine(f"pcie.gpus_per_uplink: expected an integer >= 1, got {json.dumps(v)}")
    return v


def platform_xml(cores, g, mem, lk):
    x = ["<?xml version='1.0'?>",
         '<!DOCTYPE platform SYSTEM "http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd">',
         '<platform version="4.1">',
         ' <config id="General">',
         '   <prop id="network/TCP-gamma" value="-1"></prop>',
         '   <prop id="network/latency-factor" value="1"></prop>',
         '   <prop id="network/bandwidth-factor" value="1"></prop>',
         '   <prop id="network/weight-S" value="0.0"></prop>',
         '   <prop id="network/crosstraffic" value="0"></prop>',
         ' </config>',
         ' <AS id="AS0" routing="Full">',
         '   <host id="MAIN" speed="1f"/>']
    x += [f'   <host id="CPU{c}" speed="2000000000f"/>' for c in range(cores)]
    for i in range(g):
        x += [f'   <host id="CUDA{i}" speed="2000000000f">', f'     <prop id="memsize" value="{int(mem)}"/>',
              '     <prop id="memcpy_peer" value="1"/>', '   </host>']
    x.append('   <host id="RAM" speed="1f"/>')
    name = lambda n: "RAM" if n == 0 else f"CUDA{n - 1}"
    for (s, d), (bw, lat) in sorted(lk.items()):
        x.append(f'   <link id="{name(s)}-{name(d)}" bandwidth="{bw:f}Bps" latency="{lat:f}s"/>')
    for (s, d) in sorted(lk):
        x += [f'   <route src="{name(s)}" dst="{name(d)}" symmetrical="NO">',
              f'    <link_ctn id="{name(s)}-{name(d)}"/>', '   </route>']
    x += [' </AS>', '</platform>', '']
    return "\n".join(x)


def matrix(g, lk, pick):
    head = "# " + "\t\t".join(f"to {j}" for j in range(MAX_NODES))
    rows = [head]
    for i in range(MAX_NODES):
        row = []
        for j in range(MAX_NODES):
            if i > g or j > g:
                row.append("nan")
            elif i == j:
                row.append("0.000000")
            else:
                row.append(f"{pick(lk[(i, j)]):f}")
        rows.append("\t".join(row))
    return "\n".join(rows) + "\n"


def write(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def generate(machine_path, out, ranks=1):
    m = load(machine_path)
    cores, r = rates(m)
    g = int(num(m["gpus"], "gpus", "count"))
    if ranks < 1 or (g and ranks > g) or cores // ranks < 1:
        raise BadMachine(f"--ranks {ranks}: expected 1 to gpus.count ({g}) ranks, one GPU each, "
                         f"and at least one of the host's {cores} cores per rank")
    g, lk = links(m, ranks)
    sockets = m["host"].get("sockets", 1)
    if isinstance(sockets, bool) or not isinstance(sockets, int) or sockets < 1 or cores % sockets:
        raise BadMachine(f"host.sockets: expected an integer >= 1 that divides host.cores ({cores}), "
                         f"got {json.dumps(sockets)}")
    if g > MAX_GPUS:
        raise BadMachine(f"gpus.count {g}: the simulation build simulates at most {MAX_GPUS} GPUs")
    # the links of the collectives' ring (runtime/collective_cost.hpp): GPU i -> GPU i+1; MPI over
    # shared memory: one core's copy
    gpu_link = lk[(1, 2)] if g >= 2 else (0.0, 0.0)
    r["link.gpu.bytes"], r["link.gpu.latency_us"] = gpu_link[0], gpu_link[1] * 1e6
    r["link.host.bytes"], r["link.host.latency_us"] = r["cpu.bytes"], HOST_MPI_LATENCY_S * 1e6
    cores //= ranks  # the ranks share the host: this one gets its share of the cores
    # more cores than the build's CPU workers (a DGX's 128): each worker stands for k of them, with
    # their summed FLOP/s and bandwidth (the host's whole bandwidth still shared by all its cores)
    k = -(-cores // MAX_CPUS)
    if k > 1:
        cores //= k
        for key in ("cpu.flops", "cpu.bytes", "cpu.peak.flops", "cpu.peak.bytes"):
            r[key] *= k
    r["cpu.cores_per_worker"] = k
    mem = num(m["gpus"], "gpus", "memory_bytes") if g else 0
    name = m["name"]
    os.makedirs(os.path.join(out, "bus"), exist_ok=True)
    write(os.path.join(out, "bus", f"{name}.platform.v4.xml"), platform_xml(cores, g, mem, lk))
    write(os.path.join(out, "bus", f"{name}.bandwidth"), matrix(g, lk, lambda l: l[0] / 1e6))
    write(os.path.join(out, "bus", f"{name}.latency"), matrix(g, lk, lambda l: l[1] * 1e6))
    roof = [f"# {name}: effective rates of one worker (peak x efficiency, {machine_path})"]
    roof += [f"{k} {v:.6g}" for k, v in r.items()]
    write(os.path.join(out, f"{name}.roofline"), "\n".join(roof) + "\n")
    write(os.path.join(out, f"{name}.env"),
          f"ZF_SIM_GPUS={g}\nZF_SIM_CORES={cores}\nZF_SIM_RANKS={ranks}\nZF_SIM_GPU_MEM={mem:.0f}\n")
    return name


def main(argv):
    ranks = 1
    if len(argv) == 5 and argv[3] == "--ranks":
        try:
            ranks = int(argv[4])
        except ValueError:
            print(f"sim_machine: error: --ranks: expected a number, got {argv[4]!r}", file=sys.stderr)
            return 2
        argv = argv[:3]
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        generate(argv[1], argv[2], ranks)
    except BadMachine as e:
        print(f"sim_machine: error: {argv[1]}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
