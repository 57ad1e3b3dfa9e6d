// --save-hf (models/hf/hf_model.hpp): an HfModel's tensors through hf::save_dir, one at a time.
#include "models/hf/hf_model.hpp"

#include "models/hf/save.hpp"
#include "models/workload.hpp"
#include "runtime/error.hpp"

namespace zf {

void save_hf(Workload& wl, const std::string& dir, const std::string& dtype) {
  auto* m = dynamic_cast<HfModel*>(&wl);
  if (!m) throw InputError("--save-hf " + dir, "the model is not a Hugging Face model (model.type hf)");
  hf::SaveOptions o;
  if (!dtype.empty()) o.dtype = hf::save_dtype(dtype, "--save-dtype");
  o.input = m->hf_loaded().dtypes;
  std::vector<float> values;  // the tensor being written (save_dir uses each before asking for the next)
  hf::save_dir(dir, m->hf_config(),
               [&](const hf::TensorSpec& t) {
                 values = m->hf_tensor(t);
                 return values.data();
               },
               o);
}

}  // namespace zf
