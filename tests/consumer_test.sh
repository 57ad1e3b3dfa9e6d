#!/usr/bin/env bash
# The installed engine, used as a library: `cmake --install` zenflow into a prefix inside the build
# tree, configure and build tests/consumer against it (find_package(zenflow), zenflow::engine), run it.
#   bash tests/consumer_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1" src="$2"
work="$build/consumer-test"
rm -rf "$work"
mkdir -p "$work/starpu-home"
export STARPU_HOME="$work/starpu-home"  # this test's own calibration files
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
echo "consumer_test: installed $(find "$work/prefix" -type f | wc -l) files into $work/prefix"
for f in bin/zenflow-run lib/cmake/zenflow/zenflowConfig.cmake include/zenflow/graphs/train/trainer.hpp share/zenflow/specs/mlp-fashion.json; do
  [ -e "$work/prefix/$f" ] || { echo "consumer_test: $f was not installed"; exit 1; }
done
"$work/prefix/bin/zenflow-run" --help >/dev/null
cmake -S "$src/tests/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/zenflow_consumer" "$work/prefix/share/zenflow/specs/mlp-fashion.json" 30
