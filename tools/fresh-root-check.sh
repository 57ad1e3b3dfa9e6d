#!/usr/bin/env bash
# The quick start on a freshly installed Debian 12: debootstrap (minbase + git + ca-certificates) a
# root filesystem, clone this repository's committed HEAD into it, and run the README's commands
# there in a chroot, each from a fresh copy of that root, logging every command with its time.
# Needs root, debootstrap and Debian's package registry (the mirror this machine's apt uses). Not part
# of CI. docs/gpu.md records its output.
#   sudo bash tools/fresh-root-check.sh [options] WORKDIR
#     --main         run `bash tools/zf main` (first-run time of the main job), then `bash tools/zf test`
#     --cuda DIR     add NVIDIA's CUDA toolkit folder DIR (e.g. /usr/local/cuda-13.0) at
#                    /usr/local/cuda, read-only, with no loader configuration for it (as NVIDIA's
#                    toolkit installs it); `bash tools/zf test` then also builds the CUDA variant
#     --no-test      `bash tools/zf build` instead of `bash tools/zf test` (with --deb: the packages only)
#     --deb          after the tests, `cpack -G DEB` in the root's build/, then install the packages
#                    with apt on another fresh copy of the root and run `zenflow-run --help` there
#     --keep         keep the roots after the run (default: removed, the debootstrapped one is kept)
# WORKDIR keeps pristine/ (the debootstrapped root, reused by later runs) and, per run, logs in
# WORKDIR/logs-<time>/: one log per command and summary.txt. Exit code: the first failure's.
set -euo pipefail
root_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
main=0 cuda="" deb=0 keep=0 test=1 work=""
while (($#)); do
  case "$1" in
    --main) main=1 ;;
    --cuda) cuda="$(cd "$2" && pwd -P)"; shift ;;
    --deb) deb=1 ;;
    --no-test) test=0 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fresh-root-check: unknown option $1" >&2; exit 2 ;;
    *) work="$1" ;;
  esac
  shift
done
[ -n "$work" ] || { echo "fresh-root-check: WORKDIR is required (--help)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "fresh-root-check: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
mkdir -p "$work"
work="$(cd "$work" && pwd)"
logs="$work/logs-$(date -u +%Y%m%dT%H%M%S)"
mkdir -p "$logs"
t0=$SECONDS
say() { printf '[%d:%02d] %s\n' $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)) "$*" | tee -a "$logs/summary.txt"; }

# The mirror this machine's apt uses (deb822 or one-line form), for debootstrap.
mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
[ -n "$mirror" ] || mirror="$(awk '$1 == "deb" && $0 ~ / main/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
[ -n "$mirror" ] || { echo "fresh-root-check: no Debian mirror found in /etc/apt" >&2; exit 2; }

pristine="$work/pristine"
if [ ! -x "$pristine/bin/bash" ] || [ ! -f "$pristine/.zf-debootstrap-done" ]; then
  rm -rf "$pristine"
  say "debootstrap bookworm (minbase, git, ca-certificates) into $pristine"
  debootstrap --variant=minbase --include=git,ca-certificates bookworm "$pristine" "$mirror" \
    >"$logs/debootstrap.log" 2>&1 || { tail -20 "$logs/debootstrap.log"; exit 1; }
  touch "$pristine/.zf-debootstrap-done"
fi
say "pristine root: $pristine ($(du -sh "$pristine" | cut -f1)); repository HEAD $(git -C "$root_repo" rev-parse --short HEAD)"

mounted=()
cleanup() {
  local m
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  mounted=()
}
trap cleanup EXIT

# new_root NAME: sets R to a fresh copy of the pristine root with /proc, /sys, /dev mounted and DNS settings.
new_root() {
  local r="$work/root-$1"
  R="$r"
  cleanup
  rm -rf "$r"
  cp -a "$pristine" "$r"
  cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
  mount -t proc proc "$r/proc" && mounted+=("$r/proc")
  mount --rbind /sys "$r/sys" && mounted+=("$r/sys")
  mount --rbind /dev "$r/dev" && mounted+=("$r/dev")
  if [ -n "$cuda" ]; then
    mkdir -p "$r/usr/local/$(basename "$cuda")"
    mount --bind "$cuda" "$r/usr/local/$(basename "$cuda")" && mounted+=("$r/usr/local/$(basename "$cuda")")
    mount -o remount,bind,ro "$r/usr/local/$(basename "$cuda")"
    [ "$(basename "$cuda")" = cuda ] || ln -s "$(basename "$cuda")" "$r/usr/local/cuda"
  fi
}

# in_root ROOT NAME COMMAND: run COMMAND (bash) in the chroot with a clean environment; log to NAME.log.
in_root() {
  local r="$1" name="$2" cmd="$3" t=$SECONDS rc=0
  say "$name: $cmd"
  env -i HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    chroot "$r" /bin/bash -c "$cmd" >"$logs/$name.log" 2>&1 || rc=$?
  say "$name: exit $rc in $((SECONDS - t)) s (log $logs/$name.log)"
  return $rc
}

rc=0
new_root test
r="$R"
git clone -q "$root_repo" "$r/root/zenflow"
say "cloned into $r/root/zenflow; CUDA: ${cuda:-none}; loader configuration for CUDA in the root: $(ls "$r/etc/ld.so.conf.d" | tr '\n' ' ')"
if ((main)); then
  in_root "$r" zf-main "cd /root/zenflow && bash tools/zf main" || rc=$?
  grep -E '^zf \[|eval loss|eval accuracy|wall' "$logs/zf-main.log" | tee -a "$logs/summary.txt" || true
fi
if ((rc == 0 && test == 0)); then
  in_root "$r" zf-build "cd /root/zenflow && bash tools/zf build" || rc=$?
elif ((rc == 0)); then
  # with a toolkit, the CUDA variant must build: StarPU's own build failing is a failure here
  in_root "$r" zf-test "cd /root/zenflow && ${cuda:+ZF_REQUIRE_CUDA=1 }bash tools/zf test" || rc=$?
  grep -E '^zf \[|tests passed|tests failed|zf_cuda_tests' "$logs/zf-test.log" | tee -a "$logs/summary.txt" || true
fi
if ((rc == 0 && deb)); then
  in_root "$r" cpack "cd /root/zenflow/build && cpack -G DEB && ls -l *.deb" || rc=$?
  if ((rc == 0)); then
    debs=("$r"/root/zenflow/build/*.deb)
    new_root deb
    r2="$R"
    mkdir -p "$r2/root/debs"
    cp "${debs[@]}" "$r2/root/debs/"
    in_root "$r2" deb-install "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /root/debs/*.deb && dpkg -s zenflow | grep -E '^(Version|Depends)' && zenflow-run --help | sed -n 1,5p" || rc=$?
    grep -E '^(Version|Depends)|zenflow-run' "$logs/deb-install.log" | tee -a "$logs/summary.txt" || true
  fi
fi
cleanup
if ((keep == 0)); then rm -rf "$work"/root-*; fi
say "done: exit $rc"
exit $rc
