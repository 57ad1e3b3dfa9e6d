#!/usr/bin/env bash
# A CUDA-enabled StarPU for zenflow's GPU build: Debian's own 1.3 source (apt-get source starpu)
# with CUDA, FxT, 64 CPUs and 16 buffers per task, plus our two small CUDA 13 fixes
# (tools/patches/*.patch, docs/gpu.md). Idempotent: when the prefix holds an install whose stamp
# matches this script's configuration and patches, nothing is done.
#   bash tools/build-starpu.sh [PREFIX]      default PREFIX: build/starpu-cuda
# With --simgrid: the same source built for simulation (SimGrid from Debian's libsimgrid-dev, CUDA
# off, simulated CUDA workers up to 8, docs/simulation.md); no nvcc needed.
#   bash tools/build-starpu.sh --simgrid [PREFIX]   default PREFIX: build/starpu-simgrid
# Exit status: 0 installed (or up to date); 3 StarPU's own build could not run or failed on this
# machine (disk too full, make failing twice: the reason is printed); 1 anything else (no nvcc, a
# patch that does not apply, configure, install, the checks of the result).
# Environment: ZF_STARPU_SRC (work dir, default build/starpu-src), CUDA_DIR (default /usr/local/cuda),
# ZF_STARPU_JOBS (make -j, default nproc). The CMake build uses it with
#   cmake -DZF_ENABLE_CUDA=ON -DZF_STARPU_PREFIX=PREFIX ...
set -Eeuo pipefail
# a command that fails where nothing handles it ends the script (-E: in functions too): say which,
# never silently
trap 'echo "build-starpu: error: line $LINENO: \`$BASH_COMMAND\` failed (exit $?)" >&2' ERR
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
variant=cuda
if [ "${1:-}" = --simgrid ]; then variant=simgrid; shift; fi
prefix="${1:-$root/build/starpu-$variant}"
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
src_default="$root/build/starpu-src"
[ "$variant" = cuda ] || src_default="$root/build/starpu-src-$variant"
work="${ZF_STARPU_SRC:-$src_default}"
cuda="${CUDA_DIR:-/usr/local/cuda}"
jobs="${ZF_STARPU_JOBS:-$(nproc 2>/dev/null || echo 2)}"
patches=("$root"/tools/patches/starpu-1.3-*.patch)

# MPI, Fortran and the optional libraries are off so the install needs nothing beyond CUDA,
# hwloc and FxT at run time (a GPU machine with no network gets it carried).
configure_flags=(
  --enable-cuda "--with-cuda-dir=$cuda" --with-fxt
  --enable-maxcpus=64 --enable-maxbuffers=16
  --disable-opencl --disable-build-doc --disable-build-examples --disable-build-tests
  --disable-socl --disable-starpufft --disable-mlr --disable-static
  --disable-mpi --disable-fortran --disable-glpk
)
# StarPU's libraries and tools load libcudart, libcublas and libcusparse: a run path to CUDA's
# library folder lets them link (starpu_fxt_tool) and load without any loader configuration for
# CUDA (NVIDIA's toolkit at /usr/local/cuda adds none).
cuda_libdir="$cuda/lib64"
[ -d "$cuda_libdir" ] || cuda_libdir="$cuda/lib"
ldflags="-Wl,-rpath,$cuda_libdir"
# Simulation: SimGrid's simulated CUDA workers (code under STARPU_USE_CUDA || STARPU_SIMGRID) with the
# real CUDA off (--disable-cuda is required where /usr/local/cuda exists: StarPU 1.3.10 fails
# against CUDA 13 otherwise); up to 64 simulated cores and 8 simulated GPUs.
if [ "$variant" = simgrid ]; then
  configure_flags=(
    --enable-simgrid --disable-cuda
    --enable-maxcpus=64 --enable-maxcudadev=8 --enable-maxbuffers=16
    --disable-opencl --disable-build-doc --disable-build-examples --disable-build-tests
    --disable-socl --disable-starpufft --disable-mlr --disable-static
    --disable-mpi --disable-fortran --disable-glpk
  )
  ldflags=""
fi

say() { echo "build-starpu: $*"; }
die() { echo "build-starpu: error: $*" >&2; exit 1; }
# free disk and memory where the build writes, for a failure's report
report_machine() {
  { df -h "$work" "$prefix" 2>/dev/null | awk '!seen[$0]++'; free -m 2>/dev/null | sed -n 1,2p; } |
    sed 's/^/build-starpu: machine: /' >&2 || true
}
free_mb() { df -Pm "$1" 2>/dev/null | awk 'NR == 2 {print $4}'; }

if [ "$variant" = cuda ]; then
  [ -x "$cuda/bin/nvcc" ] || die "no nvcc at $cuda/bin/nvcc (set CUDA_DIR)"
  compiler_id() { "$cuda/bin/nvcc" --version | tail -1; }
else
  compiler_id() { echo "simgrid"; }
fi
stamp_want="$( { echo "flags: ${configure_flags[*]} LDFLAGS=$ldflags prefix=$prefix"; compiler_id;
                 sha256sum "${patches[@]}" | awk '{print $1}'; } | sha256sum | awk '{print $1}')"
stamp="$prefix/.zenflow-starpu-stamp"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_want" ] && [ -f "$prefix/lib/pkgconfig/starpu-1.3.pc" ]; then
  say "up to date: $prefix"
  exit 0
fi
t0=$(date +%s)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# 1. a deb-src entry for Debian's main component (deb822, beside debian.sources)
has_deb_src() {
  grep -hqsE '^\s*Types:.*deb-src' /etc/apt/sources.list.d/*.sources && return 0
  grep -hqsE '^\s*deb-src\s.*\smain' /etc/apt/sources.list /etc/apt/sources.list.d/*.list && return 0
  return 1
}
need_update=0
if ! has_deb_src; then
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
  # the mirror of the existing deb entry (deb822 or one-line form)
  mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  [ -n "$mirror" ] || mirror="$(awk '$1 == "deb" && $0 ~ / main/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
  [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt to add a deb-src entry for"
  say "adding /etc/apt/sources.list.d/zenflow-deb-src.sources (deb-src $mirror $codename main)"
  printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$codename" | $sudo tee /etc/apt/sources.list.d/zenflow-deb-src.sources >/dev/null
  need_update=1
fi

# 2. build tools and libraries (configure is shipped: no autotools needed)
pkgs=(dpkg-dev patch make gcc g++ pkg-config libhwloc-dev libfxt-dev)
[ "$variant" = cuda ] || pkgs+=(libsimgrid-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})) || ((need_update)); then
  $sudo apt-get update -qq -o Acquire::Retries=3
fi
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends -o Acquire::Retries=3 "${missing[@]}" >/dev/null
fi

# 3. the source, fresh (patches apply to a pristine tree); downloads are kept between runs
mkdir -p "$work"
# the unpacked source and the build take about 200 MB, the install 20 MB: refuse early, saying so,
# rather than fail in the middle of make with a full disk
need_mb=400
have_mb="$(free_mb "$work")"
if [ -n "$have_mb" ] && [ "$have_mb" -lt "$need_mb" ]; then
  report_machine
  echo "build-starpu: error: only $have_mb MB free in $work; StarPU's source and build need about $need_mb MB" >&2
  exit 3
fi
cd "$work"
if ! ls starpu_1.3.*.dsc >/dev/null 2>&1; then
  say "apt-get source starpu into $work"
  apt-get source --download-only -qq -o Acquire::Retries=3 starpu 2>&1 | grep -v "unsandboxed" || true
  ls starpu_1.3.*.dsc >/dev/null 2>&1 || { $sudo apt-get update -qq -o Acquire::Retries=3; apt-get source --download-only -qq -o Acquire::Retries=3 starpu; }
fi
dsc="$(ls starpu_1.3.*.dsc | sort | tail -1)"
rm -rf src obj
dpkg-source --no-check -x "$dsc" src >/dev/null
say "source $(basename "$dsc" .dsc)"
for p in "${patches[@]}"; do
  say "patch $(basename "$p")"
  patch -d src -p1 --forward --quiet <"$p" || die "$(basename "$p") does not apply to $dsc"
done

# 4. configure, build, install
mkdir obj && cd obj
t1=$(date +%s)
say "configure (log: $work/obj/configure.log)"
../src/configure --prefix="$prefix" "${configure_flags[@]}" LDFLAGS="$ldflags" >configure.log 2>&1 ||
  { tail -n 30 configure.log >&2 || true; report_machine; die "configure failed (log $work/obj/configure.log)"; }
t2=$(date +%s)
say "make -j$jobs (log: $work/obj/make.log)"
if ! make -j"$jobs" >make.log 2>&1; then
  # What failed, whatever it printed (a full disk leaves no compiler message at all), and the
  # machine's state; then one more try, serial, which resumes where the parallel build stopped and
  # tells a race in StarPU's makefiles from a real failure.
  say "make -j$jobs failed; the end of make.log:"
  tail -n 25 make.log | sed 's/^/  | /' >&2 || true
  report_machine
  say "retrying: make -j1 (log: $work/obj/make-j1.log)"
  make -j1 >make-j1.log 2>&1 || {
    tail -n 40 make-j1.log | sed 's/^/  | /' >&2 || true
    report_machine
    echo "build-starpu: error: make failed twice (-j$jobs, then -j1); logs $work/obj/make.log and make-j1.log" >&2
    exit 3  # StarPU's own build failed on this machine (tools/zf test tells it from our faults)
  }
fi
rm -rf "$prefix"/{bin,include,lib,share}
make install >install.log 2>&1 || { tail -n 30 install.log >&2 || true; report_machine; die "make install failed"; }
t3=$(date +%s)
# the build tree (about 170 MB) is no longer needed; the downloaded source stays for the next run
cd "$work" && rm -rf src obj

# FxT's shared library travels with the prefix (a GPU machine may not have libfxt2)
# (awk reads to the end: an early exit would kill ldconfig with SIGPIPE, and pipefail + set -e
# would then end this script silently, at random)
if [ "$variant" = cuda ]; then
  fxt_lib="$(ldconfig -p | awk '/libfxt\.so\.[0-9]/ && !found {print $NF; found = 1}')"
  [ -n "$fxt_lib" ] && cp -L "$fxt_lib" "$prefix/lib/"
fi

# 5. what the engine relies on
cfg="$prefix/include/starpu/1.3/starpu_config.h"
check() { grep -qE "^#define $1 $2\b" "$cfg" || die "$cfg: expected '#define $1 $2'"; }
check STARPU_MAXCPUS 64
check STARPU_NMAXBUFS 16
if [ "$variant" = cuda ]; then
  check STARPU_USE_CUDA 1
  check STARPU_USE_FXT 1
  [ -x "$prefix/bin/starpu_fxt_tool" ] || die "starpu_fxt_tool was not installed"
  loaded=("$prefix/bin/starpu_fxt_tool" "$prefix"/lib/libstarpu-1.3.so)
  what="CUDA, FxT"
else
  check STARPU_SIMGRID 1
  check STARPU_MAXCUDADEVS 8
  loaded=("$prefix"/lib/libstarpu-1.3.so)
  what="SimGrid, 8 simulated GPUs"
fi
# every library the install loads is found without loader configuration (LD_LIBRARY_PATH unset)
unresolved="$(env -u LD_LIBRARY_PATH ldd "${loaded[@]}" 2>&1 | grep 'not found' | sort -u || true)"
[ -z "$unresolved" ] || die "the installed StarPU cannot load: $unresolved"
echo "$stamp_want" >"$stamp"
say "installed $prefix ($(du -sh "$prefix" | cut -f1)): $what, MAXCPUS 64, NMAXBUFS 16;" \
  "configure $((t2 - t1)) s, make+install $((t3 - t2)) s, total $(($(date +%s) - t0)) s"
