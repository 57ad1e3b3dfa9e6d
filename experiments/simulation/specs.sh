# Sourced by measure.sh and trace.sh (needs `root`): the validation's two specs and their options
# (steps, warm-up steps left out: calibrate.py's SPEC_ARGS; the evaluation kept short).
spec_file() { case "$1" in gpt-kjv) echo "$root/graphs/specs/gpt-kjv.json" ;; headline) echo "$root/experiments/headline/spec.json" ;; esac; }
spec_args() {
  case "$1" in
    gpt-kjv) echo "--steps 60 --set log.warmup_steps=10 --set data.eval_limit=64" ;;
    headline) echo "--steps 200 --set log.warmup_steps=20 --set data.eval_limit=100" ;;
  esac
}
