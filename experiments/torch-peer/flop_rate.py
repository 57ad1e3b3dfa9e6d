#!/usr/bin/python3
"""The Llama step's FLOP rate against the GPT step's (issue 27's target: at least 0.9), zenflow-run
device-adam, fp32, the two specs run in interleaved rounds in one go.

FLOPs of a step, counted the same way for both models (the matmuls only, forward and backward):
  6 x (weights of the linear layers, the LM head included) x tokens       (tokens = B x T)
  + 12 x layers x B x T^2 x (H x hs)     attention's products: QK^T and att V forward, their four
                                         gradient products backward, each 2 B H T^2 hs
GPT (docs/gpt.md): per layer c_attn 3C^2, attn c_proj C^2, c_fc 4C^2, mlp c_proj 4C^2; head 256 x C.
Llama (docs/llama.md, config.json): per layer q, k, v, o (C H hs, 2 C Hkv hs, H hs C), gate, up,
down (3 C F); head V x C (a tied head is still a matmul).
The rate is FLOPs / the median over the rounds of each run's median step (`step_time_s.median`
of the metrics, the warm-up steps excluded).
  flop_rate.py [--rounds 3] [--steps 60] [--out DIR] [--trace-csv] [-- extra zenflow-run args]
--trace-csv also writes each run's per-task CSV (for experiments/zenflow-overhead/breakdown.py
style per-kernel sums: kernel_sums.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "..", ".."))


def effective_spec(zf, spec):
    return json.loads(subprocess.run([zf, spec, "--print-spec"], check=True, capture_output=True, text=True).stdout)


def step_flops(spec):
    """(FLOPs per step, description) of a gpt or hf (Llama) spec's training step."""
    m, B = spec["model"], spec["train"]["batch_size"]
    T = m["context"]
    if m["type"] == "gpt":
        C, L, V = m["n_embd"], m["n_layer"], 256
        linear = L * 12 * C * C + V * C
        attn_width = C
    elif m["type"] == "hf":
        path = m["path"] if os.path.isabs(m["path"]) else os.path.join(root, m["path"])
        with open(os.path.join(path, "config.json")) as f:
            c = json.load(f)
        C, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
        H = c["num_attention_heads"]
        Hkv, hs = c.get("num_key_value_heads", H), c.get("head_dim", C // H)
        linear = L * (2 * C * H * hs + 2 * C * Hkv * hs + 3 * C * F) + V * C
        attn_width = H * hs
    else:
        raise SystemExit(f"flop_rate.py: model.type {m['type']!r}: gpt or hf")
    return 6 * linear * B * T + 12 * L * B * T * T * attn_width, linear


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", default=os.path.join(here, "out", "flop-rate"))
    ap.add_argument("--trace-csv", action="store_true")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    zf = os.path.join(os.environ.get("ZF_BUILD_DIR", os.path.join(root, "build")), "zenflow-run")
    os.makedirs(a.out, exist_ok=True)
    specs = {"gpt": os.path.join(root, "graphs/specs/gpt-kjv.json"),
             "llama": os.path.join(root, "graphs/specs/llama-kjv.json")}
    flops = {k: step_flops(effective_spec(zf, s)) for k, s in specs.items()}
    med = {k: [] for k in specs}
    loads = []
    for r in range(1, a.rounds + 1):
        for k, s in specs.items():
            m = os.path.join(a.out, f"{k}.r{r}.json")
            cmd = [zf, s, "--strategy", "device-adam", "--set", "precision=fp32", "--steps", str(a.steps),
                   "--set", "log.warmup_steps=10", "--set", "data.eval_limit=32", "--metrics", m, "-q"]
            if a.trace_csv:
                cmd += ["--trace-csv", os.path.join(a.out, f"{k}.r{r}.csv"), "--trace-from", "10"]
            load = float(open("/proc/loadavg").read().split()[0])
            subprocess.run(cmd + a.extra, check=True)
            t = json.load(open(m))["step_time_s"]["median"]
            med[k].append(t)
            loads.append(load)
            print(f"round {r} {k:5s} median step {1e3 * t:8.2f} ms  {flops[k][0] / t / 1e9:6.1f} GFLOP/s  "
                  f"(load {load:.2f})", flush=True)
    res = {}
    for k in specs:
        t = statistics.median(med[k])
        res[k] = {"flops_per_step": flops[k][0], "linear_weights": flops[k][1], "median_step_s": t,
                  "rounds_s": med[k], "gflops": flops[k][0] / t / 1e9}
        print(f"{k:5s}: {flops[k][0] / 1e9:.3f} GFLOP/step ({flops[k][1]} linear weights), median step "
              f"{1e3 * t:.2f} ms over {a.rounds} rounds ({', '.join('%.2f' % (1e3 * x) for x in med[k])}), "
              f"{res[k]['gflops']:.1f} GFLOP/s")
    ratio = res["llama"]["gflops"] / res["gpt"]["gflops"]
    res["ratio"] = ratio
    res["load"] = [min(loads), max(loads)]
    print(f"Llama / GPT FLOP rate: {ratio:.3f} (target >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'}); "
          f"1-minute load {min(loads):.2f}-{max(loads):.2f}")
    with open(os.path.join(a.out, "flop-rate.json.tmp"), "w") as f:
        json.dump(res, f, indent=1)
    os.replace(os.path.join(a.out, "flop-rate.json.tmp"), os.path.join(a.out, "flop-rate.json"))
    return 0 if ratio >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
