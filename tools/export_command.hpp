// `zenflow-run export --resume CKPT --save-hf OUT`: a checkpoint as a Hugging Face model directory,
// without training (docs/finetune.md).
#pragma once

namespace zf::tools {

// argv[0] is "export". Exit codes as zenflow-run's: 0, 2 bad input, 1 a failure.
int export_main(int argc, char** argv);

}  // namespace zf::tools
