"""ZeRO stage 3 vs stage 2 (stage3.sh): out/stage3.md from out/stage3/[zenflow.]r<R>.s<stage>.json and
the saved weights."""
import json
import os
import struct
import sys

out = sys.argv[1]


def weights(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    w = {}
    for k, v in head.items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            w[k] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return w


def rel(a, b):  # the largest relative L2 difference over the tensors
    worst = 0.0
    for k in a:
        d = sum((x - y) ** 2 for x, y in zip(a[k], b[k])) ** 0.5
        n = sum(y * y for y in b[k]) ** 0.5
        worst = max(worst, d / n if n else d)
    return worst


L = ["# ZeRO stage 3 against stage 2 (zero-offload and zenflow, MLP 784-8x1024-10)", "",
     "| strategy | ranks | stage | device param MB (largest rank) | x stage 2 | shards MB | whole layers MB (peak) | "
     "gradients MB | device optimizer MB | all-gather MB/step | reduce-scatter MB/step | gradient all-reduce MB/step | "
     "step ms (median) | final loss | vs stage 2 |",
     "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for s, prefix in (("zero-offload", ""), ("zenflow", "zenflow.")):
    for r in (2, 4):
        if not os.path.exists(f"{out}/stage3/{prefix}r{r}.s3.json"):
            continue
        m = {st: json.load(open(f"{out}/stage3/{prefix}r{r}.s{st}.json")) for st in (2, 3)}
        w = {st: weights(f"{out}/stage3/{prefix}r{r}.s{st}.safetensors") for st in (2, 3)}
        p2 = max(m[2]["data_parallel"]["device_param_bytes_per_rank"])
        for st in (2, 3):
            d, ds = m[st]["data_parallel"], m[st]["device_state_bytes"]
            p = max(d["device_param_bytes_per_rank"])
            L.append(f"| {s} | {r} | {st} | {p / 1e6:.2f} | {p / p2:.3f} | {ds['params_shards'] / 1e6:.2f} | "
                     f"{ds['params_transient'] / 1e6:.2f} | {ds['grads'] / 1e6:.2f} | {ds['optimizer'] / 1e6:.3f} | "
                     f"{d['allgather_bytes_per_step'] / 1e6:.2f} | {d['reduce_scatter_bytes_per_step'] / 1e6:.2f} | "
                     f"{d['allreduce_bytes_per_step']['gradients'] / 1e6:.3f} | "
                     f"{m[st]['step_time_s']['median'] * 1e3:.0f} | {m[st]['final']['train_loss']:.4f} | "
                     f"{'-' if st == 2 else '%.2g relative' % rel(w[3], w[2])} |")
t = open(f"{out}/stage3/time.txt").read().strip() if os.path.exists(f"{out}/stage3/time.txt") else ""
L += ["", t, ""]
open(f"{out}/stage3.md", "w").write("\n".join(L))
print("\n".join(L))
