// StarPU's calibration files: the bus benchmark (sampling/bus/HOST.{config,affinity,bandwidth,
// latency,platform*.xml}) and the codelets' performance models (sampling/codelets/45/NAME.HOST).
// StarPU 1.3 aborts (assertion, exit 134) on an empty or garbled one, e.g. an empty HOST.affinity
// left by a run killed while calibrating, and keeps aborting until the file is deleted. Before
// starpu_init the runtime checks them: a damaged bus file removes that host's bus files (StarPU
// measures the bus again), a damaged performance model is removed (its samples start over), each
// said on stderr.
#pragma once
#include <ostream>
#include <string>

namespace zf {

// The directory StarPU reads them from: $STARPU_PERF_MODEL_DIR, else $STARPU_HOME/.starpu/sampling,
// else $HOME/.starpu/sampling ("" if none is set).
std::string calibration_dir();

// Checks and repairs the files under `sampling_dir` (missing: nothing to do). Returns the number of
// files removed; each removal is explained on `log`.
int repair_calibration(const std::string& sampling_dir, std::ostream& log);

}  // namespace zf
