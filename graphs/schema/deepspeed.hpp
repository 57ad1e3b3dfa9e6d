// The DeepSpeed translator's part of load_spec (deepspeed_patch itself is in spec.hpp).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphs/schema/spec.hpp"

namespace zf {

// Merges the DeepSpeed config at `path` into the spec's JSON j (its zenflow, scheduler and fp16
// blocks replace the spec's); prints the notes on stderr. The config's "auto" values are filled
// from `auto_from` (the spec with its --set overrides) as Hugging Face Trainer fills them.
void apply_deepspeed(nlohmann::json& j, const std::string& path, int ranks, const nlohmann::json& auto_from);
// Records in s.field_origin the fields that came from the DeepSpeed file (unless an override set
// them), so that later messages name that file.
void record_deepspeed_origins(Spec& s, const std::string& path, const std::vector<std::string>& overrides);

}  // namespace zf
