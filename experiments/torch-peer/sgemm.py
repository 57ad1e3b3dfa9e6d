#!/usr/bin/python3
"""The machine's SGEMM rate as numpy reaches it (Debian's numpy calls the system OpenBLAS), with the
OpenBLAS environment as it is (OPENBLAS_NUM_THREADS chooses the threads, read at load time).
Prints one JSON object: {"n", "blas_threads", "gflops_median", "gflops_max", "coretype"}.
Usage: sgemm.py [--n 2048] [--reps 7]
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=2048)
ap.add_argument("--reps", type=int, default=7)
a = ap.parse_args()
rng = np.random.default_rng(1)
x = rng.standard_normal((a.n, a.n), dtype=np.float32)
y = rng.standard_normal((a.n, a.n), dtype=np.float32)
x @ y  # warm-up: thread start, page faults
rates = []
for _ in range(a.reps):
    t0 = time.perf_counter()
    x @ y
    rates.append(2 * a.n ** 3 / (time.perf_counter() - t0) / 1e9)
print(json.dumps({"n": a.n, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                  "gflops_median": statistics.median(rates), "gflops_max": max(rates),
                  "coretype": os.environ.get("OPENBLAS_CORETYPE", "(not set)")}))
