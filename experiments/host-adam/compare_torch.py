#!/usr/bin/python3
"""PyTorch's CPU AdamW over the same 1e8 fp32 parameters as tools/bench_host_adam.cpp.

Times optimizer.step() of torch.optim.AdamW (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight
decay 0.01, as the benchmark) with torch.set_num_threads(THREADS), for each implementation this
torch offers on the CPU: the for-loop one (foreach=False), foreach=True, and fused=True where the
constructor accepts it and the CPU supports it (torch >= 2.4). Prints one JSON object per line:
{"impl", "ran", "threads", "n", "tensors", "median_s", "min_s", "times_s", "note"}.
Usage: compare_torch.py [--n 1e8] [--threads 2] [--tensors 1] [--steps 5] [--warmup 2]
"""
import argparse
import inspect
import json
import statistics
import time

import torch


def make_params(n, tensors):
    sizes = [n // tensors + (1 if i < n % tensors else 0) for i in range(tensors)]
    params = []
    for s in sizes:
        p = torch.nn.Parameter(torch.empty(s, dtype=torch.float32).uniform_(-0.5, 0.5))
        p.grad = torch.empty(s, dtype=torch.float32).uniform_(-5e-3, 5e-3)
        params.append(p)
    return params


def time_impl(impl, args):
    params = make_params(args.n, args.tensors)
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    sig = inspect.signature(torch.optim.AdamW).parameters
    if impl == "foreach":
        kw["foreach"] = True
    elif impl == "fused":
        if "fused" not in sig:
            return {"impl": impl, "ran": False, "note": f"torch {torch.__version__}: AdamW has no fused argument"}
        kw["fused"] = True
    elif "foreach" in sig:
        kw["foreach"] = False
    try:
        opt = torch.optim.AdamW(params, **kw)
        opt.step()  # state (m, v) is created and first-touched here
    except (RuntimeError, ValueError) as e:
        return {"impl": impl, "ran": False, "note": f"torch {torch.__version__}: {str(e).splitlines()[0]}"}
    for _ in range(args.warmup - 1):
        opt.step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    del opt, params
    return {"impl": impl, "ran": True, "median_s": statistics.median(times), "min_s": min(times),
            "times_s": times, "note": f"torch {torch.__version__}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=1e8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tensors", type=int, default=1, help="split the parameters into this many tensors")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--impls", default="forloop,foreach,fused")
    args = ap.parse_args()
    args.n = int(args.n)
    torch.set_num_threads(args.threads)
    for impl in args.impls.split(","):
        r = time_impl(impl, args)
        r.update(threads=torch.get_num_threads(), n=args.n, tensors=args.tensors)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
