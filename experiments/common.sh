# Sourced by the experiments' run.sh after they set `here` (their folder) and `out` (results):
# sets `root` and `py` (Debian's interpreter: python3-matplotlib is installed for it, not for a
# pyenv one), builds the engine (only the targets of the array zf_targets when the caller sets it,
# e.g. zf_targets=(zenflow-run); everything otherwise), installs matplotlib when missing, creates
# $out and gives the experiment its own STARPU_HOME (calibrated performance models stay with its
# results).
root="$(cd "$here/../.." && pwd)"
py=/usr/bin/python3
bash "$root/tools/zf" build ${zf_targets[@]+"${zf_targets[@]}"} >/dev/null
$py -c "import matplotlib" 2>/dev/null || bash "$root/tools/zf" setup-plots
mkdir -p "$out"
export STARPU_HOME="$out/starpu-home" STARPU_SILENT=1
