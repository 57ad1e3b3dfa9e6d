#!/usr/bin/env bash
# Data parallel across two hosts, made on this machine: two network namespaces joined by a veth
# pair (made and removed here), mpirun in the first with --host A,B, the rank of B started by
# mpirun's launcher agent (plm_rsh_agent: the script below, in ssh's place, runs the command in B's
# namespace), `--mca btl tcp,self` and the veth as the only interface of both the byte transport
# (btl_tcp_if_include) and mpirun's control channel (oob_tcp_if_include). That is the path a
# two-host `mpirun --host a,b` takes. docs/data-parallel.md, "Two hosts".
# Checked, for zenflow at stage 0 and zero-offload at stage 2 (reduce-scatter, all-gather):
#   - each rank ran in its own namespace (rank 0 in A, rank 1 in B)
#   - replicas identical, bytes counted (tests/dp_check.py metrics)
#   - the weights are bitwise those of the same 2-rank run over shared memory on the host (one
#     process's arithmetic is the same; the reductions of 2 ranks add the same two numbers whatever
#     carries them), so the transport changes nothing
#   - the veth carried at least the gradient bytes the metrics count (each rank must receive every
#     element's sum: nothing went around the veth)
# Skipped (exit 77, the reason printed) where namespaces or a veth cannot be made: not root, no `ip`
# (Debian package iproute2), no permission (an unprivileged container), no veth driver.
# Usage: dp_netns_test.sh ZENFLOW_RUN SOURCE_DIR MPIRUN. Prints "FAIL: ..." and exits 1 on failure.
set -u

if [ $# -ne 3 ]; then
  echo "usage: $0 ZENFLOW_RUN SOURCE_DIR MPIRUN" >&2
  exit 1
fi
BIN=$1
SRC=$2
MPIRUN=$3
CHECK="/usr/bin/python3 $SRC/tests/dp_check.py"
SPEC=$SRC/graphs/specs/mlp-fashion.json
SKIP=77  # SKIP_RETURN_CODE in tests/CMakeLists.txt

skip() {
  echo "SKIP: $*"
  exit $SKIP
}
[ "$(id -u)" -eq 0 ] || skip "not root: making network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN"
command -v ip >/dev/null || skip "no 'ip' command (Debian package iproute2)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zf_dpns_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
# unique per run (tests run in parallel): this shell's pid and the temporary directory's suffix
NSA=zfdp-$$-${TMP##*_}-a
NSB=zfdp-$$-${TMP##*_}-b
IPA=10.231.0.1
IPB=10.231.0.2
IF=zfdp0  # the veth's end in each namespace (one name per namespace, so the same in both)
cleanup() {
  # deleting a namespace deletes its end of the veth, and the pair with it
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP  # through the EXIT trap
# a run killed with SIGKILL (a ctest timeout) leaves its namespaces: remove those whose shell is gone
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(zfdp-[0-9]*-[A-Za-z0-9]*-[ab]\).*/\1/p'); do
  pid=${ns#zfdp-}
  kill -0 "${pid%%-*}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done
export STARPU_HOME=$TMP/starpu-home  # this test's own calibration home; each rank its own below it
export STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
mkdir -p "$STARPU_HOME"

fail() {
  echo "FAIL: $*"
  echo "---- command output (stdout+stderr) ----"
  cat "$TMP/out" 2>/dev/null
  exit 1
}

# ------------------------------------------------------------------ the two "hosts"
ip netns add "$NSA" 2>"$TMP/err" || skip "ip netns add failed: $(cat "$TMP/err")"
ip netns add "$NSB" 2>"$TMP/err" || skip "ip netns add failed: $(cat "$TMP/err")"
ip -n "$NSA" link add "$IF" type veth peer name "$IF" netns "$NSB" 2>"$TMP/err" ||
  skip "cannot make a veth pair: $(cat "$TMP/err")"
for x in "$NSA $IPA" "$NSB $IPB"; do
  set -- $x
  ip -n "$1" addr add "$2/24" dev "$IF" && ip -n "$1" link set "$IF" up && ip -n "$1" link set lo up ||
    fail "cannot configure $IF in $1"
done
echo "namespaces $NSA ($IPA) and $NSB ($IPB), joined by veth $IF"

# The launcher agent, called as ssh would be: AGENT HOST COMMAND... (COMMAND a shell command line)
cat >"$TMP/agent" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
  $IPA) ns=$NSA ;;
  $IPB) ns=$NSB ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
echo "\$host" >>"$TMP/agent.log"
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$TMP/agent"

# The MLP of dp_test.sh: 20 steps of a global batch of 64 on the 784-32-16-10 MLP, host tiles of
# 1024 elements (stage 2 partitions whole tiles).
SMALL=(--set 'model.hidden=[32,16]' --set data.train_limit=2048 --set data.eval_limit=500
  --set train.batch_size=64 --set runtime.device_workers=1 --set runtime.host_workers=1 -q --steps 20
  --set runtime.tile_elems=1024)
ZENFLOW=(--strategy zenflow --set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4
  --set zenflow.overlap_step=true --set 'zenflow.select_strategy="step"' --set zenflow.select_interval=8)
ZERO2=(--strategy zero-offload --set zero_optimization.stage=2)

# each rank: its own STARPU_HOME; writes the namespace it runs in to $TMP/ns-RANK
RANK_WRAP=(bash -c 'r=${OMPI_COMM_WORLD_RANK:-0}; export STARPU_HOME="$STARPU_HOME/rank-$r"
  mkdir -p "$STARPU_HOME" && { ip netns identify $$ >"$ZF_NS_OUT/ns-$r"; exec "$@"; }' rank)
export ZF_NS_OUT=$TMP
ENVS=(-x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND -x ZF_NS_OUT)

# two_hosts NAME ARGS...: the run across the namespaces, into $TMP/NAME-tcp.{safetensors,json}
two_hosts() {
  local name=$1
  shift
  rm -f "$TMP"/ns-*
  ip netns exec "$NSA" timeout 300 "$MPIRUN" --host "$IPA,$IPB" -np 2 --bind-to none \
    --mca plm_rsh_agent "$TMP/agent" --mca btl tcp,self --mca btl_tcp_if_include "$IF" \
    --mca oob_tcp_if_include "$IF" "${ENVS[@]}" "${RANK_WRAP[@]}" "$BIN" "$SPEC" "$@" \
    --save "$TMP/$name-tcp.safetensors" --metrics "$TMP/$name-tcp.json" >"$TMP/out" 2>&1 ||
    fail "$name: the two-namespace run exited $?"
  [ "$(cat "$TMP/ns-0" 2>/dev/null)" = "$NSA" ] && [ "$(cat "$TMP/ns-1" 2>/dev/null)" = "$NSB" ] ||
    fail "$name: ranks 0 and 1 ran in '$(cat "$TMP/ns-0" 2>/dev/null)' and '$(cat "$TMP/ns-1" 2>/dev/null)', expected $NSA and $NSB"
  grep -qx "$IPB" "$TMP/agent.log" 2>/dev/null || fail "$name: mpirun did not start $IPB through the agent"
  echo "$name: rank 0 in $NSA, rank 1 in $NSB (started through the launcher agent)"
}

# shared_memory NAME ARGS...: the same run on this host over shared memory (btl vader,self)
shared_memory() {
  local name=$1
  shift
  timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np 2 --mca btl vader,self "${ENVS[@]}" \
    "${RANK_WRAP[@]}" "$BIN" "$SPEC" "$@" --save "$TMP/$name-shm.safetensors" >"$TMP/out" 2>&1 ||
    fail "$name: the shared-memory run exited $?"
}

rx_bytes() { ip netns exec "$NSA" cat "/sys/class/net/$IF/statistics/rx_bytes"; }

for name in zenflow zero2; do
  if [ $name = zenflow ]; then A=("${ZENFLOW[@]}"); else A=("${ZERO2[@]}"); fi
  rx0=$(rx_bytes)
  two_hosts $name "${SMALL[@]}" "${A[@]}"
  rx=$(($(rx_bytes) - rx0))
  $CHECK metrics "$TMP/$name-tcp.json" "$TMP/$name-tcp.safetensors" 2 || exit 1
  /usr/bin/python3 -c "import json, sys
m = json.load(open(sys.argv[1]))
dp = m['data_parallel']
grad = (dp['allreduce_bytes_per_step']['gradients'] + dp.get('reduce_scatter_bytes_per_step', 0)) * m['steps']
rx = int(sys.argv[2])
print('$name: the veth carried %d bytes to rank 0, the gradients %d' % (rx, grad))
assert rx >= grad, 'fewer bytes over the veth than the gradients: they went another way'" \
    "$TMP/$name-tcp.json" "$rx" || fail "$name: the veth did not carry the gradients"
  shared_memory $name "${SMALL[@]}" "${A[@]}"
  $CHECK close "$TMP/$name-tcp.safetensors" "$TMP/$name-shm.safetensors" 0 || exit 1
done
echo "ok: data_parallel.two_namespaces"
