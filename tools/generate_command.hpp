// `zenflow-run generate --model DIR --prompt TEXT`: text sampled from a Hugging Face model
// directory with a KV cache, on the host (models/hf/generate.hpp; docs/hf.md, "Generation").
#pragma once

namespace zf::tools {

// argv[0] is "generate". Exit codes as zenflow-run's: 0, 2 bad input, 1 a failure.
int generate_main(int argc, char** argv);

}  // namespace zf::tools
