#include "models/formats/weights.hpp"

#include <algorithm>
#include <cmath>

#include "models/formats/safetensors.hpp"
#include "runtime/error.hpp"

namespace zf {

void save_weights(Workload& w, const std::string& path, const std::string& description) {
  StFile f;
  f.metadata["format"] = "zenflow-weights";
  f.metadata["model"] = description;
  for (Param* p : w.params()) f.tensors[p->name] = st_f32(p->logical_shape(), logical_values(*p).data());
  write_safetensors(path, f);
}

void load_weights(Workload& w, const std::string& path) {
  StFile f = read_safetensors(path);
  auto params = w.params();
  for (Param* p : params) {
    auto it = f.tensors.find(p->name);
    if (it == f.tensors.end() && w.optional_on_init(p->name)) continue;  // keeps its initial value
    if (it == f.tensors.end()) throw InputError(path + ": " + p->name, "tensor missing from the file");
    const StTensor& t = it->second;
    if (t.dtype != "F32") throw InputError(path + ": " + p->name, "dtype " + t.dtype + ", expected F32");
    if (t.shape != p->logical_shape()) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string r = "[";
        for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      throw InputError(path + ": " + p->name, "shape " + str(t.shape) + ", the model needs " + str(p->logical_shape()));
    }
  }
  for (auto& entry : f.tensors) {  // (clang 14 cannot capture a structured binding in a lambda)
    const std::string& name = entry.first;
    bool known = std::any_of(params.begin(), params.end(), [&](Param* p) { return p->name == name; });
    if (!known && !w.ignorable_on_init(name))
      throw InputError(path + ": " + name, "tensor not in this model (different architecture?)");
  }
  for (Param* p : params) {
    if (!f.tensors.count(p->name)) continue;  // optional_on_init
    auto v = f.tensors[p->name].as_f32();
    for (size_t i = 0; i < v.size(); ++i)  // a NaN or Inf weight would train to NaN silently
      if (!std::isfinite(v[i]))
        throw InputError(path + ": " + p->name, "element " + std::to_string(i) + " is " +
                                                    (std::isnan(v[i]) ? "NaN" : "infinite") +
                                                    ", expected finite weights");
    set_logical_values(*p, v.data());
  }
}

}  // namespace zf
