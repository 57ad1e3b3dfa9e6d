// A Hugging Face GPT-2 directory as the engine's GPT (models/hf/gpt2_hf.hpp): the config mapped onto
// GptConfig, the checkpoint's tensors read into the parameters (Conv1D (in, out) = Param::in_out
// storage) and written back in the checkpoint's layout for --save-hf.
#include "models/hf/gpt2_hf.hpp"

#include <map>

#include "runtime/error.hpp"

namespace zf {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

int as_int(int64_t v) { return (int)v; }  // hf::Config bounds every dimension by 2^24

}  // namespace

GptConfig gpt2_config(const hf::Config& c, const GptConfig& run) {
  if (c.family != hf::Family::Gpt2)
    throw InputError(c.path + ": model_type", "\"" + c.model_type + "\" is not a GPT-2 (model_type \"gpt2\")");
  if (c.head_dim * c.num_heads != c.hidden_size)
    throw InputError(c.path + ": n_head", std::to_string(c.num_heads) + " heads must divide n_embd = " +
                                              std::to_string(c.hidden_size));
  if (run.context < 1 || run.context > c.max_positions)
    throw InputError(c.path + ": n_positions", "the training window (model.context = " + std::to_string(run.context) +
                                                   ") must be in [1, n_positions = " +
                                                   std::to_string(c.max_positions) + "]");
  GptConfig g = run;
  g.n_layer = as_int(c.num_layers);
  g.n_head = as_int(c.num_heads);
  g.n_embd = as_int(c.hidden_size);
  g.vocab = as_int(c.vocab_size);
  g.n_positions = as_int(c.max_positions);
  g.n_inner = as_int(c.intermediate_size);
  g.ln_eps = (float)c.norm_eps;
  g.tied_head = c.tie_word_embeddings;
  return g;
}

std::string gpt2_param_name(const std::string& hf_name) {
  const std::string base = "transformer.";
  std::string n = hf_name.rfind(base, 0) == 0 ? hf_name.substr(base.size()) : hf_name;
  if (n == "wte.weight" || n == "wpe.weight") n.resize(3);
  return n;
}

bool gpt2_conv1d(const std::string& hf_name) {
  for (const char* t : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(hf_name, t)) return true;
  return false;
}

Gpt2HfModel::Gpt2HfModel(const hf::Config& c, const std::string& dir, const GptConfig& run, TokenSplit data,
                         StepStatus* status)
    : GptLanguageModel(gpt2_config(c, run), std::move(data), status), hf_(c) {
  load(dir);
}

Gpt2HfModel::Gpt2HfModel(const hf::Config& c, const std::string& dir, const GptConfig& run, LmRowSplit rows,
                         StepStatus* status)
    : GptLanguageModel(gpt2_config(c, run), std::move(rows), status), hf_(c) {
  load(dir);
}

std::string Gpt2HfModel::describe() const {
  return "GPT-2 (Hugging Face, " + std::string(load_.from_files ? "weights read" : "initialised") + ") " +
         GptLanguageModel::describe();
}

Param& Gpt2HfModel::param(const std::string& hf_name) {
  const std::string n = gpt2_param_name(hf_name);
  for (Param* p : params())
    if (p->name == n) return *p;
  throw Error("Gpt2HfModel: no parameter " + n + " for tensor " + hf_name);
}

// Every tensor straight into its parameter's storage where the layouts agree (all but the Conv1D
// weights of an (out, in) model), else into a buffer transposed into it afterwards.
void Gpt2HfModel::load(const std::string& dir) {
  std::map<std::string, std::vector<float>> staged;  // Conv1D (in, out) for an (out, in) parameter
  for (Param* p : params()) p->value.acquire_write();
  try {
    load_ = hf::load_weights(dir, hf_,
                             config().hf_random_init ? hf::InitFrom::random_init(config().init_seed)
                                                     : hf::InitFrom::files(), [&](const hf::TensorSpec& t) -> float* {
      Param& p = param(t.name);
      if (t.numel() != p.value.numel())
        throw Error("Gpt2HfModel: tensor " + t.name + " " + hf::shape_str(t.shape) + " vs parameter " + p.name);
      if (gpt2_conv1d(t.name) && !p.in_out) {
        std::vector<float>& v = staged[t.name];
        v.resize(t.numel());
        return v.data();
      }
      return p.value.data();
    });
    for (auto& [name, v] : staged) {  // (in, out) -> the (out, in) storage
      Param& p = param(name);
      transpose(v.data(), p.cols(), p.rows(), p.value.data());
    }
  } catch (...) {
    for (Param* p : params()) p->value.release();
    throw;
  }
  for (Param* p : params()) p->value.release();
}

std::vector<float> Gpt2HfModel::hf_values(const hf::TensorSpec& t) {
  Param& p = param(t.name);
  std::vector<float> v = logical_values(p);  // (out, in) for a weight
  if (!gpt2_conv1d(t.name)) return v;
  std::vector<float> io(v.size());
  transpose(v.data(), p.rows(), p.cols(), io.data());
  return io;
}

void Gpt2HfModel::save_hf(const std::string& out_dir, hf::SaveOptions o) {
  if (o.input.empty()) o.input = load_.dtypes;
  std::vector<float> buf;  // save_dir uses each tensor's values before it asks for the next
  hf::save_dir(out_dir, hf_, [&](const hf::TensorSpec& t) -> const float* {
    buf = hf_values(t);
    return buf.data();
  }, o);
}

std::unique_ptr<Workload> make_hf_gpt2(const hf::Config& c, const std::string& dir, const GptConfig& run,
                                       TokenSplit data, StepStatus* status) {
  return std::make_unique<Gpt2HfModel>(c, dir, run, std::move(data), status);
}

std::unique_ptr<Workload> make_hf_gpt2(const hf::Config& c, const std::string& dir, const GptConfig& run,
                                       LmRowSplit rows, StepStatus* status) {
  return std::make_unique<Gpt2HfModel>(c, dir, run, std::move(rows), status);
}

}  // namespace zf
