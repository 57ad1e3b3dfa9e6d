// A workload's weights as a safetensors file (--save) and back (--init), in the logical (out, in)
// layout whatever the storage (Param::in_out). Loading checks every name, dtype and shape and
// refuses non-finite values with an InputError naming the file and the tensor.
#pragma once
#include <string>

#include "models/workload.hpp"

namespace zf {

void save_weights(Workload& w, const std::string& path, const std::string& description);
void load_weights(Workload& w, const std::string& path);

}  // namespace zf
