#!/usr/bin/python3
"""Checks of the data-parallel tests (tests/dp_test.sh) on safetensors weights and metrics JSON.
  dp_check.py close A.safetensors B.safetensors ATOL   every weight |a - b| <= ATOL
  dp_check.py rel A.safetensors B.safetensors RTOL     every tensor ||a - b|| / ||b|| <= RTOL (L2 norms)
  dp_check.py far A.safetensors B.safetensors RMIN     some tensor ||a - b|| / ||b|| > RMIN
  dp_check.py metrics M.json W.safetensors RANKS       data_parallel block: ranks, replicas identical,
                                                       gradient bytes = 4 x parameters, importance bytes
                                                       per selection (zenflow) = sum over 2-D weights of
                                                       C x 4 with dp_selection local-sum or at stage 2,
                                                       else 0 (exact selection needs no collective)
  dp_check.py selection EXACT.json PROXY.json          zenflow's exact selection against the local-sum proxy,
                                                       same run otherwise: the same selections and gradient
                                                       bytes per step, importance bytes per selection no more
  dp_check.py single M.json                            a single-process run has no data_parallel block
  dp_check.py zero M0.json M.json STAGE W.safetensors PARTS SLACK
                                                       ZeRO stage STAGE (M.json) against stage 0 (M0.json), same
                                                       ranks: host_state_bytes per rank sum to stage 0's and each
                                                       is within SLACK elements' worth of 1/R of it (the
                                                       partition's rounding); collective bytes per step
                                                       (all-gather = partitioned parameters x 4; stage 2:
                                                       reduce-scatter = the same, stage 1: none); PARTS: "all"
                                                       (zero-offload) or "2d" (zenflow) partitioned parameters
  dp_check.py balance M0.json M.json LO HI            the largest rank's host_state_bytes of a partitioned run
                                                       (M.json) is LO-HI x stage 0's (M0.json); the ranks' sum it
  dp_check.py stage3 M2.json M3.json W.safetensors TILE    ZeRO stage 3 (M3.json) against stage 2 (M2.json), same
                                                       ranks: device parameter bytes per rank = the shards (1/R
                                                       of stage 2's within the partition's rounding) + at most
                                                       two whole layers; host state as stage 2's; all-gather and
                                                       reduce-scatter bytes per step
  dp_check.py zenflow3 M2.json M3.json                 zenflow at stage 3 against stage 2, same ranks: the same
                                                       selections, importance bytes per selection no more, no
                                                       gradient all-reduce, device optimizer bytes no more
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


def rel_diffs(a_path, b_path):
    a, b = read_safetensors(a_path), read_safetensors(b_path)
    if sorted(a) != sorted(b):
        fail("different tensors: %s vs %s" % (sorted(a), sorted(b)))
    out = {}
    for name in sorted(a):
        d = sum((x - y) ** 2 for x, y in zip(a[name][1], b[name][1])) ** 0.5
        n = sum(y * y for y in b[name][1]) ** 0.5
        out[name] = d / n if n > 0 else (0.0 if d == 0 else float("inf"))
    return out


def rel(a_path, b_path, rtol):
    r = rel_diffs(a_path, b_path)
    print("relative L2 per tensor (tolerance %.3g): %s" % (rtol, ", ".join("%s %.3g" % kv for kv in r.items())))
    if not max(r.values()) <= rtol:
        fail("a tensor differs beyond the tolerance")


def far(a_path, b_path, rmin):
    r = rel_diffs(a_path, b_path)
    print("relative L2 per tensor (expected some > %.3g): %s" % (rmin, ", ".join("%s %.3g" % kv for kv in r.items())))
    if not max(r.values()) > rmin:
        fail("no tensor differs by more than %g: the case does not tell the selections apart" % rmin)


def gap(a_path, one_path, ref_path):
    """A (a run on several ranks) is closer to ONE (one process, same precision) than ONE is to REF
    (one process in fp32), at the largest relative L2 per tensor: the wire's rounding costs less
    than the precision's own"""
    w, p = rel_diffs(a_path, one_path), rel_diffs(one_path, ref_path)
    print("relative L2 per tensor, the run vs one process: %s (largest %.3g); one process vs fp32: %s (largest %.3g)"
          % (", ".join("%s %.3g" % kv for kv in w.items()), max(w.values()),
             ", ".join("%s %.3g" % kv for kv in p.items()), max(p.values())))
    if not max(w.values()) < max(p.values()):
        fail("the run is farther from one process than the precision is from fp32")


def selection(exact_path, proxy_path):
    e, p = json.load(open(exact_path)), json.load(open(proxy_path))
    de, dpx = e["data_parallel"], p["data_parallel"]
    ie, ip = de["per_selection"]["importance_bytes"], dpx["per_selection"]["importance_bytes"]
    ge, gp = de["allreduce_bytes_per_step"]["gradients"], dpx["allreduce_bytes_per_step"]["gradients"]
    print("stage %d, %d ranks: importance bytes per selection exact %d, local-sum %d; selections %d and %d; "
          "gradient all-reduce bytes per step %g and %g" % (de["zero_stage"], de["ranks"], ie, ip, de["selections"],
                                                            dpx["selections"], ge, gp))
    if de.get("dp_selection") != "exact" or dpx.get("dp_selection") != "local-sum":
        fail("dp_selection %s and %s, expected exact and local-sum" % (de.get("dp_selection"), dpx.get("dp_selection")))
    if de["selections"] != dpx["selections"] or de["selections"] < 1:
        fail("selections %d and %d" % (de["selections"], dpx["selections"]))
    if ie > ip or ge > gp:
        fail("exact selection moves more bytes than the local-sum proxy")


def grad_wire_bytes(m):
    """bytes a gradient value crosses in: 2 on a bf16/fp16 wire (communication_data_type, by
    default the precision's), else 4"""
    dp = m["data_parallel"]
    w = dp.get("communication_data_type")
    if w not in ("fp32", "bf16", "fp16"):
        fail("data_parallel.communication_data_type %r" % (w,))
    want = m.get("communication_data_type") or m.get("precision", "fp32")
    if w != want:
        fail("data_parallel.communication_data_type %s, the spec asks %s" % (w, want))
    return 2 if w in ("bf16", "fp16") else 4


def metrics(m_path, w_path, ranks):
    m = json.load(open(m_path))
    w = read_safetensors(w_path)
    dp = m.get("data_parallel")
    if dp is None:
        fail("no data_parallel block in " + m_path)
    numel = sum(len(v) for _, v in w.values())
    imp = sum(shape[1] * 4 for shape, _ in w.values() if len(shape) == 2)
    steps = m["steps"] - m.get("resumed_at_step", 0)
    gb = grad_wire_bytes(m)
    got_imp = dp["allreduce_bytes_per_step"]["importance"] * steps
    sel = m.get("selection", {}).get("selections", 0)
    print("ranks %d, replicas identical %s, hashes %s, gradient bytes/step %g (%d x %d), importance bytes %g over "
          "%d selections" % (dp["ranks"], dp["replicas_identical"], dp["weight_hashes"],
                             dp["allreduce_bytes_per_step"]["gradients"], gb, numel, got_imp, sel))
    if dp["ranks"] != ranks:
        fail("ranks %d, expected %d" % (dp["ranks"], ranks))
    if dp["replicas_identical"] is not True or len(set(dp["weight_hashes"])) != 1 or len(dp["weight_hashes"]) != ranks:
        fail("replicas differ: %s" % dp["weight_hashes"])
    if dp.get("zero_stage", 0) >= 2:  # reduce-scattered ones are not all-reduced (checked by "zero")
        got = dp["allreduce_bytes_per_step"]["gradients"] + dp["reduce_scatter_bytes_per_step"]
        if got < gb * numel:
            fail("all-reduced + reduce-scattered gradient bytes per step %g, expected >= %d" % (got, gb * numel))
    elif dp["allreduce_bytes_per_step"]["gradients"] != gb * numel:
        fail("gradient bytes per step %g, expected %d" % (dp["allreduce_bytes_per_step"]["gradients"], gb * numel))
    if dp["per_selection"]["importance_allreduce_bytes"] != imp:
        fail("per_selection.importance_allreduce_bytes %d, expected %d"
             % (dp["per_selection"]["importance_allreduce_bytes"], imp))
    if m["strategy"] == "zenflow":
        # exact selection at stages 0 and 1 reads the all-reduced gradient: no importance collective
        each = imp if dp["dp_selection"] == "local-sum" or dp.get("zero_stage", 0) >= 2 else 0
        print("dp_selection %s: %d importance bytes per selection expected" % (dp["dp_selection"], each))
        if sel < 1 or abs(got_imp - sel * each) > 1e-6 * imp or dp["selections"] != sel:
            fail("importance bytes %g for %d selections (%d counted), expected %d each"
                 % (got_imp, sel, dp["selections"], each))
        if dp["per_selection"]["importance_bytes"] != each:
            fail("per_selection.importance_bytes %d, expected %d" % (dp["per_selection"]["importance_bytes"], each))
    elif got_imp != 0 or dp["per_selection"]["importance_bytes"] != 0 or "dp_selection" in dp:
        fail("importance bytes %g without zenflow" % got_imp)


def zero(m0_path, m_path, stage, w_path, parts, slack):
    m0, m = json.load(open(m0_path)), json.load(open(m_path))
    d0, d = m0["data_parallel"], m["data_parallel"]
    w = read_safetensors(w_path)
    part = sum(len(v) for shape, v in w.values() if parts == "all" or len(shape) == 2)
    numel = sum(len(v) for _, v in w.values())
    ranks = d["ranks"]
    s0, s = d0["host_state_bytes_per_rank"], d["host_state_bytes_per_rank"]
    per_elem = s0[0] / part  # host bytes per partitioned element (every buffer of the strategy)
    bound = per_elem * slack  # `slack` elements' worth of every buffer: the partition's rounding
    print("stage %d, %d ranks: host state per rank %s (stage 0: %s; 1/R = %.0f, bound +-%.0f); bytes/step: "
          "all-reduce %g, reduce-scatter %g, all-gather %g; host AdamW s/step per rank %s"
          % (stage, ranks, s, s0, s0[0] / ranks, bound, d["allreduce_bytes_per_step"]["gradients"],
             d["reduce_scatter_bytes_per_step"], d["allgather_bytes_per_step"], d["host_adam_s_per_step_per_rank"]))
    if d["zero_stage"] != stage or d0["zero_stage"] != 0:
        fail("zero_stage %d and %d, expected %d and 0" % (d["zero_stage"], d0["zero_stage"], stage))
    if len(s) != ranks or len(set(s0)) != 1 or len(s0) != ranks:
        fail("host_state_bytes_per_rank %s / stage 0 %s" % (s, s0))
    if sum(s) != s0[0]:
        fail("the ranks' host state sums to %d, stage 0 holds %d per rank" % (sum(s), s0[0]))
    worst = max(abs(x - s0[0] / ranks) for x in s)
    if worst > bound:
        fail("a rank's host state is %g bytes off 1/R of stage 0's (bound %g)" % (worst, bound))
    if m["host_state_bytes"] != s[0]:
        fail("host_state_bytes %d, rank 0 has %d" % (m["host_state_bytes"], s[0]))
    if len(d["host_adam_s_per_step_per_rank"]) != ranks or min(d["host_adam_s_per_step_per_rank"]) <= 0:
        fail("host_adam_s_per_step_per_rank %s" % d["host_adam_s_per_step_per_rank"])
    # the parameters are gathered at their stored bytes (2 a value under bf16/fp16), the gradients
    # reduced in their wire's format
    pb = 2 if m.get("precision") in ("bf16", "fp16") else 4
    gb = grad_wire_bytes(m)
    if m["strategy"] != "zenflow" and d["allgather_bytes_per_step"] != pb * part:  # zenflow: at merges only
        fail("all-gather bytes per step %g, expected %d" % (d["allgather_bytes_per_step"], pb * part))
    if m["strategy"] == "zenflow" and not 0 < d["allgather_bytes_per_step"] <= pb * part:
        fail("all-gather bytes per step %g, expected in (0, %d]" % (d["allgather_bytes_per_step"], pb * part))
    rs = d["reduce_scatter_bytes_per_step"]
    if stage == 2 and rs != gb * part:
        fail("reduce-scatter bytes per step %g, expected %d" % (rs, gb * part))
    if stage == 1 and (rs != 0 or d["allreduce_bytes_per_step"]["gradients"] != gb * numel):
        fail("stage 1: reduce-scatter %g, all-reduce %g bytes per step, expected 0 and %d"
             % (rs, d["allreduce_bytes_per_step"]["gradients"], gb * numel))
    if stage == 2 and parts == "all" and d["allreduce_bytes_per_step"]["gradients"] != 0:
        fail("stage 2: gradients all-reduced (%g bytes per step)" % d["allreduce_bytes_per_step"]["gradients"])


def balance(m0_path, m_path, lo, hi):
    """The largest rank's host state of a partitioned run is in [lo, hi] x stage 0's (m0: the same
    run at stage 0); the ranks' shares sum to stage 0's."""
    d0, d = json.load(open(m0_path))["data_parallel"], json.load(open(m_path))["data_parallel"]
    s0, s = d0["host_state_bytes_per_rank"], d["host_state_bytes_per_rank"]
    ratio = max(s) / s0[0]
    print("stage %d, %d ranks: host state per rank %s, stage 0 %d: the largest holds %.4f of it (expected %g-%g)"
          % (d["zero_stage"], d["ranks"], s, s0[0], ratio, lo, hi))
    if d0["zero_stage"] != 0 or d["zero_stage"] == 0 or d["ranks"] != d0["ranks"] or len(s) != d["ranks"]:
        fail("stages %d and %d on %d and %d ranks" % (d0["zero_stage"], d["zero_stage"], d0["ranks"], d["ranks"]))
    if sum(s) != s0[0]:
        fail("the ranks' host state sums to %d, stage 0 holds %d per rank" % (sum(s), s0[0]))
    if not lo <= ratio <= hi:
        fail("the largest rank holds %.4f of stage 0's host state, expected %g-%g" % (ratio, lo, hi))


def stage3(m2_path, m3_path, w_path, tile):
    """ZeRO stage 3 vs stage 2 at the same R: device parameter bytes per rank 1/R of stage 2's
    (the shards, within the partition's rounding) plus at most one whole layer's (the default
    stage3_max_live_parameters; a larger one: two, the one in use and the one prefetched); the
    host state as stage 2's; the collective bytes per step"""
    m2, m3 = json.load(open(m2_path)), json.load(open(m3_path))
    d2, d3 = m2["data_parallel"], m3["data_parallel"]
    w = read_safetensors(w_path)
    R = d3["ranks"]
    # a parameter's bytes on the device: 2 under bf16/fp16 (its 2-byte storage), else 4; the
    # gradients' reduce-scatter moves its wire's bytes (communication_data_type)
    eb = 2 if m3.get("precision") in ("bf16", "fp16") else 4
    n = sum(len(v) for _, v in w.values())
    total, total4 = eb * n, grad_wire_bytes(m3) * n
    layers = {}  # fcN -> elements of fcN.weight and fcN.bias
    for name, (_, v) in w.items():
        layers[name.split(".")[0]] = layers.get(name.split(".")[0], 0) + len(v)
    two = eb * sum(sorted(layers.values())[-2:])
    one = eb * max(layers.values())
    live = d3["stage3_max_live_parameters"]
    bound = one if eb * live <= one else two  # whole layers at once: one within the default budget
    last = eb * layers[sorted(layers, key=lambda n: int(n[2:]))[-1]]
    slack = eb * tile + eb * len(w)  # whole host tiles per rank; a one-element shard where a rank owns none
    p2, p3 = d2["device_param_bytes_per_rank"], d3["device_param_bytes_per_rank"]
    b3 = m3["device_state_bytes"]
    print("stage 3, %d ranks: device parameter bytes per rank %s (stage 2: %s, ratio %.3f); rank 0: shards %d, "
          "transient %d (1/R of stage 2 = %.0f, bound %d: max live %d elements); gradients %d; all-gather %g, "
          "reduce-scatter %g bytes/step; host state %s (stage 2: %s)"
          % (R, p3, p2, max(p3) / p2[0], b3["params_shards"], b3["params_transient"], total / R, bound, live, b3["grads"],
             d3["allgather_bytes_per_step"], d3["reduce_scatter_bytes_per_step"], d3["host_state_bytes_per_rank"],
             d2["host_state_bytes_per_rank"]))
    if d3["zero_stage"] != 3 or d2["zero_stage"] != 2 or d2["ranks"] != R:
        fail("zero_stage %d and %d (ranks %d, %d), expected 3 and 2" % (d3["zero_stage"], d2["zero_stage"], R, d2["ranks"]))
    if p2 != [total] * R:
        fail("stage 2 device parameter bytes %s, expected %d on every rank" % (p2, total))
    if abs(b3["params_shards"] - total / R) > slack:
        fail("rank 0's shards hold %d bytes, 1/R of the parameters is %.0f (+-%d)" % (b3["params_shards"], total / R, slack))
    if not 0 < b3["params_transient"] <= bound:
        fail("rank 0 holds %d bytes of whole layers at once, expected (0, %d]" % (b3["params_transient"], bound))
    if len(p3) != R or max(p3) > total / R + slack + bound:
        fail("device parameter bytes per rank %s exceed 1/R of stage 2's + %d (%.0f)" % (p3, bound, total / R + slack + bound))
    if b3["params"] != p3[0] or b3["total"] != d3["device_state_bytes_per_rank"][0]:
        fail("device_state_bytes %s disagrees with the per-rank lists" % b3)
    if d3["host_state_bytes_per_rank"] != d2["host_state_bytes_per_rank"]:
        fail("host state %s, stage 2 has %s" % (d3["host_state_bytes_per_rank"], d2["host_state_bytes_per_rank"]))
    # every layer gathered for its forward, again for its backward except the last (kept), at its
    # stored bytes (2 a value under bf16/fp16: the 2-byte bits move as they are)
    if d3["allgather_bytes_per_step"] != 2 * total - last:
        fail("all-gather bytes per step %g, expected %d" % (d3["allgather_bytes_per_step"], 2 * total - last))
    if d3["reduce_scatter_bytes_per_step"] != total4 or d3["allreduce_bytes_per_step"]["gradients"] != 0:
        fail("reduce-scatter %g, all-reduce %g gradient bytes per step, expected %d and 0"
             % (d3["reduce_scatter_bytes_per_step"], d3["allreduce_bytes_per_step"]["gradients"], total4))


def zenflow3(m2_path, m3_path):
    """zenflow at ZeRO stage 3 (M3) against stage 2 (M2), same ranks: the same selections, importance
    bytes per selection no more than stage 2's, no gradient all-reduce (stage 2 all-reduces the
    selected columns; at stage 3 each owner updates its own), device optimizer state no more"""
    m2, m3 = json.load(open(m2_path)), json.load(open(m3_path))
    d2, d3 = m2["data_parallel"], m3["data_parallel"]
    i2, i3 = d2["per_selection"]["importance_bytes"], d3["per_selection"]["importance_bytes"]
    g2, g3 = d2["allreduce_bytes_per_step"]["gradients"], d3["allreduce_bytes_per_step"]["gradients"]
    o2, o3 = m2["device_state_bytes"]["optimizer"], m3["device_state_bytes"]["optimizer"]
    print("zenflow, %d ranks: importance bytes per selection stage 2 %d, stage 3 %d; selections %d and %d (%s); "
          "gradient all-reduce bytes per step %g and %g; device optimizer bytes on rank 0 %d and %d"
          % (d3["ranks"], i2, i3, d2["selections"], d3["selections"], m3["selection"], g2, g3, o2, o3))
    if m2["strategy"] != "zenflow" or m3["strategy"] != "zenflow" or d2["zero_stage"] != 2 or d3["zero_stage"] != 3:
        fail("expected zenflow at stages 2 and 3")
    if d3["dp_selection"] != "exact" or i3 > i2 or i3 <= 0:
        fail("stage 3 importance bytes per selection %d (%s), stage 2 %d" % (i3, d3["dp_selection"], i2))
    if d2["selections"] != d3["selections"] or m2["selection"] != m3["selection"] or d3["selections"] < 1:
        fail("selections differ: %s and %s" % (m2["selection"], m3["selection"]))
    if g3 != 0 or g2 <= 0:
        fail("gradient all-reduce bytes per step %g at stage 3 (expected 0), %g at stage 2 (expected > 0)" % (g3, g2))
    if not 0 < o3 <= o2:
        fail("device optimizer bytes %d at stage 3, %d at stage 2" % (o3, o2))


def single(m_path):
    m = json.load(open(m_path))
    if "data_parallel" in m:
        fail("a single-process run reports data_parallel")
    print("single process: no data_parallel block")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "close" and len(sys.argv) == 5:
        close(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif cmd == "rel" and len(sys.argv) == 5:
        rel(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif cmd == "far" and len(sys.argv) == 5:
        far(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif cmd == "gap" and len(sys.argv) == 5:
        gap(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "selection" and len(sys.argv) == 4:
        selection(sys.argv[2], sys.argv[3])
    elif cmd == "metrics" and len(sys.argv) == 5:
        metrics(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "zero" and len(sys.argv) == 8:
        zero(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], int(sys.argv[7]))
    elif cmd == "balance" and len(sys.argv) == 6:
        balance(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    elif cmd == "stage3" and len(sys.argv) == 6:
        stage3(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif cmd == "zenflow3" and len(sys.argv) == 4:
        zenflow3(sys.argv[2], sys.argv[3])
    elif cmd == "single" and len(sys.argv) == 3:
        single(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
