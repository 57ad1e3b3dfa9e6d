"""The memory table of experiments/host-adam (memory.sh): host_state_bytes of each run, per
parameter (784-8192-512-10: every weight and bias), and its ratio to zero-offload's at the same
precision. Writes memory.csv and memory.md into the second argument's folder."""
import csv
import json
import os
import sys

PARAMS = 784 * 8192 + 8192 + 8192 * 512 + 512 + 512 * 10 + 10  # the [8192, 512] MLP
ORDER = ["device-adam", "zero-offload", "zero-offload-dpu", "zenflow-D1", "zenflow-D2", "zenflow-D1-deepspeed"]


def main(runs, dest):
    rows = []
    for prec in ("fp32", "bf16"):
        base = None
        for label in ORDER:
            path = os.path.join(runs, "%s.%s.json" % (label, prec))
            if not os.path.exists(path):
                continue
            b = json.load(open(path))["host_state_bytes"]
            if label == "zero-offload":
                base = b
            rows.append({"strategy": label, "precision": prec, "host_state_bytes": b,
                         "bytes_per_param": b / PARAMS, "vs_zero_offload": b / base if base else None})
    with open(os.path.join(dest, "memory.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(dest, "memory.md"), "w") as f:
        f.write("| strategy | precision | host_state_bytes | bytes per parameter | vs zero-offload |\n")
        f.write("|---|---|---|---|---|\n")
        for r in rows:
            ratio = "%.3f" % r["vs_zero_offload"] if r["vs_zero_offload"] is not None else "-"
            f.write("| %s | %s | %s | %.2f | %s |\n" % (r["strategy"], r["precision"], format(r["host_state_bytes"], ","),
                                                     r["bytes_per_param"], ratio))
    print(open(os.path.join(dest, "memory.md")).read(), end="")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
