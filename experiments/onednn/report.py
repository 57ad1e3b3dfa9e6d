# Summary of experiments/onednn/run.sh: the matmul rates at the GPT's shapes and the GPT step times
# before and after, as ratios of medians over the rounds.
import json
import statistics
import sys

out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/matmul.jsonl")]
print("## One matmul call, one thread (GFLOP/s)\n")
print("| layer | product | weight | M x N x K | OpenBLAS | oneDNN fp32 | oneDNN bf16 | bf16 + conversion | fp32 / OpenBLAS | bf16 / fp32 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['layer']} | {r['op']} | {'(in, out)' if r['in_out'] else '(out, in)'} | {r['M']} x {r['N']} x {r['K']} | "
          f"{r['openblas']:.0f} | {r['onednn_f32']:.0f} | {r['onednn_bf16']:.0f} | {r['onednn_bf16_with_conversion']:.0f} | "
          f"{r['onednn_f32'] / r['openblas']:.2f} | {r['onednn_bf16'] / r['onednn_f32']:.2f} |")
gm = lambda k: statistics.geometric_mean([r[k] for r in rows])
print(f"\nGeometric means: OpenBLAS {gm('openblas'):.0f}, oneDNN fp32 {gm('onednn_f32'):.0f}, "
      f"bf16 {gm('onednn_bf16'):.0f} ({gm('onednn_bf16_with_conversion'):.0f} with the conversion).")
print("\n## SGEMM 2048^3\n")
for l in open(f"{out}/sgemm.jsonl"):
    s = json.loads(l)
    print(f"- {s['threads']} thread(s): OpenBLAS {s['openblas']:.0f} GFLOP/s, oneDNN fp32 {s['onednn_f32']:.0f} ({s['impl']})")
steps = [json.loads(l) for l in open(f"{out}/steps.jsonl")]
med = {}
for w in sorted({s["what"] for s in steps}):
    v = [s["median_s"] for s in steps if s["what"] == w]
    med[w] = statistics.median(v)
    print(f"\n- {w}: median {1e3 * med[w]:.2f} ms (rounds: {', '.join('%.2f' % (1e3 * x) for x in v)})", end="")
print("\n\n## Ratios (of the medians over the rounds)\n")
for a, b in [("before-fp32", "after-fp32"), ("before-bf16", "after-bf16"), ("after-fp32", "after-bf16"),
             ("before-fp32", "before-bf16")]:
    if a in med and b in med:
        print(f"- {a} / {b}: {med[a] / med[b]:.2f}x")
gflop = 5.73  # a gpt-kjv step (experiments/torch-peer)
if "after-fp32" in med:
    print(f"\nafter-fp32: {gflop / med['after-fp32']:.0f} GFLOP/s on the step's 5.73 GFLOP")
print(f"\nload during the steps: {min(s['load'] for s in steps):.2f}-{max(s['load'] for s in steps):.2f}")
