#!/usr/bin/env bash
# The attention that keeps no T x T matrix (lse saved, probabilities recomputed block by block:
# docs/architecture.md, "Attention") against the one it replaced, which saved the probabilities
# (B, H, T, T), on gpt-kjv.json's model (4 layers, 4 heads of 32) at T = 64, 256, 1024 and 4096
# with B x T = 1024, 2048, 2048, 4096 tokens a step, device-adam, fp32 and bf16; per run the
# attention tasks' time per step (from --trace-csv), the step's median, the activation buffers
# (device_state_bytes.activations) and the process's peak RSS (/usr/bin/time -v). The two
# engines alternate inside each round (shared machines: only ratios taken in one run mean something).
#   bash experiments/flash-attention/run.sh     env: ROUNDS (3), STEPS (12; the first 4 excluded),
#        BASE (the commit of the kept-probabilities attention, 7d9360b), BASE_BIN (a zenflow-run
#        built at BASE; without it the script builds one in out/base, a few minutes with ccache),
#        SIZES (the T:B pairs, "64:16 256:8 1024:2 4096:1")
# Writes out/runs.csv and out/summary.md (medians over the rounds, new / base ratios).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/out"
zf_targets=(zenflow-run)
source "$here/../common.sh"
rounds=${ROUNDS:-3}
steps=${STEPS:-12}
base=${BASE:-7d9360b}
base_bin=${BASE_BIN:-}
sizes=${SIZES:-"64:16 256:8 1024:2 4096:1"}
if [ -z "$base_bin" ]; then
  if [ ! -x "$out/base/build/zenflow-run" ]; then
    rm -rf "$out/base"
    git -C "$root" worktree add --detach "$out/base" "$base" >/dev/null
    cmake -S "$out/base" -B "$out/base/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$out/base/build" -j "$(nproc)" --target zenflow-run >/dev/null
  fi
  base_bin="$out/base/build/zenflow-run"
fi
csv="$out/runs.csv"
echo "engine,precision,T,B,round,attention_ms_per_step,median_step_ms,activation_bytes,peak_rss_kib" >"$csv"
for r in $(seq "$rounds"); do
  for tb in $sizes; do
    T=${tb%:*} B=${tb#*:}
    for p in fp32 bf16; do
      for engine in base new; do
        bin="$root/build/zenflow-run"
        [ "$engine" = base ] && bin="$base_bin"
        m="$out/$engine.$p.$T.$r.json" t="$out/$engine.$p.$T.$r.csv" tv="$out/$engine.$p.$T.$r.time"
        /usr/bin/time -v -o "$tv" "$bin" "$root/graphs/specs/gpt-kjv.json" --strategy device-adam --steps "$steps" \
          --set model.context="$T" --set train.batch_size="$B" --set train.eval_batch_size="$B" \
          --set precision="\"$p\"" --set log.warmup_steps=4 --set data.eval_limit="$B" \
          --trace-csv "$t" --trace-from 4 --metrics "$m" -q
        row=$($py - "$m" "$t" "$tv" <<'PY'
import csv, json, re, sys
m = json.load(open(sys.argv[1]))
att, steps = 0.0, set()
for r in csv.DictReader(open(sys.argv[2])):
    steps.add(r["step"])
    if r["codelet"] in ("zf_attention_fwd", "zf_attention_bwd"):
        att += float(r["end_us"]) - float(r["start_us"])
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[3]).read()).group(1))
print(round(att / 1e3 / max(1, len(steps)), 2), round(m["step_time_s"]["median"] * 1e3, 1),
      m["device_state_bytes"]["activations"], rss, sep=",")
PY
)
        echo "$engine,$p,$T,$B,$r,$row" | tee -a "$csv"
        rm -f "$t"
      done
    done
  done
done
$py - "$csv" "$out/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda sel, k: statistics.median(float(r[k]) for r in sel)
lines = ["| precision | T | B | attention ms/step base | new | new / base | step ms base | new | new / base | activation MiB base | new | peak RSS MiB base | new |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for p in ("fp32", "bf16"):
    for T in dict.fromkeys(r["T"] for r in rows):
        b = [r for r in rows if (r["engine"], r["precision"], r["T"]) == ("base", p, T)]
        n = [r for r in rows if (r["engine"], r["precision"], r["T"]) == ("new", p, T)]
        if not b or not n:
            continue
        a0, a1 = med(b, "attention_ms_per_step"), med(n, "attention_ms_per_step")
        s0, s1 = med(b, "median_step_ms"), med(n, "median_step_ms")
        lines.append(f"| {p} | {T} | {b[0]['B']} | {a0:.1f} | {a1:.1f} | {a1 / a0:.3f} | {s0:.1f} | {s1:.1f} | {s1 / s0:.3f} | "
                     f"{med(b, 'activation_bytes') / 2**20:.1f} | {med(n, 'activation_bytes') / 2**20:.1f} | "
                     f"{med(b, 'peak_rss_kib') / 1024:.0f} | {med(n, 'peak_rss_kib') / 1024:.0f} |")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
