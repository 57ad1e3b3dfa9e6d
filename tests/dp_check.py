#!/usr/bin/python3
"""Checks of the data-parallel tests (tests/dp_test.sh) on safetensors weights and metrics JSON.
  dp_check.py close A.safetensors B.safetensors ATOL   every weight |a - b| <= ATOL
  dp_check.py metrics M.json W.safetensors RANKS       data_parallel block: ranks, replicas identical,
                                                       gradient bytes = 4 x parameters, importance bytes
                                                       per selection = sum over 2-D weights of C x 4
  dp_check.py single M.json                            a single-process run has no data_parallel block
Prints what it compared; exits 1 with "FAIL: ..." on a mismatch."""
import json
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (path, name, t["dtype"])
        s, e = t["data_offsets"]
        out[name] = (t["shape"], struct.unpack("<%df" % ((e - s) // 4), data[s:e]))
    return out


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def close(a_path, b_path, atol):
    a, b = read_safetensors(a_path), read_safetensors(b_path)
    if sorted(a) != sorted(b):
        fail("different tensors: %s vs %s" % (sorted(a), sorted(b)))
    worst, where = 0.0, ""
    for name in a:
        for i, (x, y) in enumerate(zip(a[name][1], b[name][1])):
            if abs(x - y) > worst:
                worst, where = abs(x - y), "%s[%d]: %r vs %r" % (name, i, x, y)
    print("max |a - b| = %.3g (tolerance %.3g) %s" % (worst, atol, where))
    if not worst <= atol:
        fail("weights differ beyond the tolerance")


def metrics(m_path, w_path, ranks):
    m = json.load(open(m_path))
    w = read_safetensors(w_path)
    dp = m.get("data_parallel")
    if dp is None:
        fail("no data_parallel block in " + m_path)
    numel = sum(len(v) for _, v in w.values())
    imp = sum(shape[1] * 4 for shape, _ in w.values() if len(shape) == 2)
    steps = m["steps"] - m.get("resumed_at_step", 0)
    got_imp = dp["allreduce_bytes_per_step"]["importance"] * steps
    sel = m.get("selection", {}).get("selections", 0)
    print("ranks %d, replicas identical %s, hashes %s, gradient bytes/step %g (4 x %d), importance bytes %g over "
          "%d selections (%d per selection expected)" % (dp["ranks"], dp["replicas_identical"], dp["weight_hashes"],
                                                         dp["allreduce_bytes_per_step"]["gradients"], numel, got_imp,
                                                         sel, imp))
    if dp["ranks"] != ranks:
        fail("ranks %d, expected %d" % (dp["ranks"], ranks))
    if dp["replicas_identical"] is not True or len(set(dp["weight_hashes"])) != 1 or len(dp["weight_hashes"]) != ranks:
        fail("replicas differ: %s" % dp["weight_hashes"])
    if dp["allreduce_bytes_per_step"]["gradients"] != 4 * numel:
        fail("gradient bytes per step %g, expected %d" % (dp["allreduce_bytes_per_step"]["gradients"], 4 * numel))
    if dp["per_selection"]["importance_bytes"] != imp:
        fail("per_selection.importance_bytes %d, expected %d" % (dp["per_selection"]["importance_bytes"], imp))
    if m["strategy"] == "zenflow":
        if sel < 1 or abs(got_imp - sel * imp) > 1e-6 * imp or dp["selections"] != sel:
            fail("importance bytes %g for %d selections, expected %d each" % (got_imp, sel, imp))
    elif got_imp != 0:
        fail("importance bytes %g without zenflow" % got_imp)


def single(m_path):
    m = json.load(open(m_path))
    if "data_parallel" in m:
        fail("a single-process run reports data_parallel")
    print("single process: no data_parallel block")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "close" and len(sys.argv) == 5:
        close(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif cmd == "metrics" and len(sys.argv) == 5:
        metrics(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "single" and len(sys.argv) == 3:
        single(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
