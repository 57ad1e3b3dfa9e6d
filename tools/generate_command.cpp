// zenflow-run generate: reads DIR's config.json, its weights (or, with --init random, Hugging
// Face's init from --init-seed) and its tokenizer, encodes the prompt (config.json's BOS first,
// as `zenflow-run tokenize` writes training data), and samples up to --max-new-tokens tokens with a
// KV cache (models/hf/generate.hpp). stdout: the prompt and the continuation as it comes;
// stderr: the tokens and the tokens/s of the prefill and of the decoding.
#include "tools/generate_command.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "graphs/train/memory_estimate.hpp"
#include "models/hf/generate.hpp"
#include "models/hf/load.hpp"
#include "models/data/chat.hpp"
#include "models/data/instructions.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "runtime/error.hpp"
#include "runtime/host_helpers.hpp"
#include "runtime/parallel.hpp"
#include "tools/cli_checks.hpp"

namespace zf::tools {

namespace {

struct GenerateArgs {
  std::string model, prompt, init;
  std::string tmpl, input;  // --template alpaca: the prompt is the instruction, --input its input
  std::string system;       // --template chat: a system message before the prompt
  int64_t max_new_tokens = 64;
  hf::SamplingParams sampling;
  uint64_t seed = 0, init_seed = 0;
  int threads = 1;
  bool no_bos = false;
};

// The text the model continues: --prompt; with --template alpaca the prompt rendered in Alpaca's
// template (the one data.dataset "instructions" trains on: --prompt the instruction, --input its
// input); with --template chat the user's message (after --system's) in the model's chat template
// with the generation prompt, as data.dataset "chat" renders the turns before a reply.
std::string model_prompt(const GenerateArgs& a, const ChatFormat* chat) {
  tok::check_utf8(a.prompt, "--prompt");
  tok::check_utf8(a.input, "--input");
  tok::check_utf8(a.system, "--system");
  if (!a.input.empty() && a.tmpl != "alpaca")
    throw InputError("--input", "only with --template alpaca (the record's input field)");
  if (!a.system.empty() && a.tmpl != "chat") throw InputError("--system", "only with --template chat");
  if (a.tmpl.empty()) return a.prompt;
  if (a.prompt.empty())
    throw InputError("--prompt", "empty: with --template " + a.tmpl + " it is the " +
                                     (a.tmpl == "chat" ? "user's message" : "instruction"));
  if (a.tmpl == "alpaca") return alpaca_prompt(a.prompt, a.input);
  std::vector<tok::ChatMessage> m;
  if (!a.system.empty()) m.push_back({"system", a.system});
  m.push_back({"user", a.prompt});
  return chat->tmpl.render(m, true, chat->specials);
}

// The prompt's ids: BOS (config.json's first bos_token_id) unless --no-bos, then the text's.
std::vector<int32_t> prompt_ids(const GenerateArgs& a, const std::string& text, const hf::Config& c,
                                const tok::Tokenizer& t, const ChatFormat* chat) {
  std::vector<int32_t> ids;
  if (!a.no_bos && !c.bos_token_ids.empty() && !chat) {  // a chat template writes its own BOS
    const int64_t bos = c.bos_token_ids.front();
    if (bos >= c.vocab_size)  // only an absent field's default can be (read_config checks given ids)
      throw InputError(c.path + ": bos_token_id",
                       std::string("absent, and the ") + hf::family_name(c.family) + " default " + std::to_string(bos) +
                           " is not below vocab_size " + std::to_string(c.vocab_size) +
                           " (expected the id, or null for none; or --no-bos)");
    if (!t.has_id((uint32_t)bos))  // below vocab_size (read_config), but the text could not be decoded
      throw InputError(c.path + ": bos_token_id", std::to_string(bos) + " is not an id of " + t.describe() +
                                                     " (--no-bos leaves it out)");
    ids.push_back((int32_t)bos);
  }
  for (uint32_t id : chat ? encode_chat_text(text, t, *chat) : t.encode(text)) {
    if (id >= (uint64_t)c.vocab_size)
      throw InputError(a.model + ": " + t.describe(), "the prompt's token id " + std::to_string(id) +
                                                          " is not below config.json's vocab_size " +
                                                          std::to_string(c.vocab_size));
    ids.push_back((int32_t)id);
  }
  if (ids.empty() && chat)
    throw InputError(a.model + "/tokenizer_config.json: chat_template", "renders no text for --prompt's message: "
                                                                        "nothing to start from");
  if (ids.empty())
    throw InputError("--prompt", "empty, and no BOS to start from (config.json has no bos_token_id, or --no-bos)");
  if ((int64_t)ids.size() > c.max_positions)
    throw InputError("--prompt", std::to_string(ids.size()) + " tokens, more than the model's " +
                                     std::to_string(c.max_positions) + " positions (" + c.path +
                                     ": max_position_embeddings)");
  return ids;
}

// The ids the sampler may draw: below both vocabularies, and known to the tokenizer (a
// tokenizer.json may skip ids); empty when that is every id below `n`.
std::vector<int32_t> allowed_ids(const tok::Tokenizer& t, int n, const std::string& model) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i)
    if (t.has_id((uint32_t)i)) ids.push_back(i);
  if (ids.empty())
    throw InputError(model + ": " + t.describe(),
                     "has none of the ids below config.json's vocab_size: nothing to draw");
  if ((int)ids.size() == n) ids.clear();
  return ids;
}

// Refused before anything is allocated: a model, cache or prompt larger than the memory available
// (ZF_SKIP_MEMORY_CHECK=1 skips it, as for a training run).
void check_generate_memory(const GenerateArgs& a, const hf::Config& c, int64_t context, int64_t prompt_tokens) {
  if (const char* v = std::getenv("ZF_SKIP_MEMORY_CHECK"); v && std::string(v) == "1") return;
  const hf::GenerateMemory g = hf::generate_memory(c, context, prompt_tokens);
  const int64_t avail = available_memory();
  if (avail < 0 || g.total() <= (double)avail) return;
  auto gib = [](double b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f", b / (1u << 30));
    return std::string(s);
  };
  const std::string fields =
      g.cache >= g.weights && g.cache >= g.work
          ? c.path + ": max_position_embeddings, num_hidden_layers, num_key_value_heads (and --max-new-tokens " +
                std::to_string(a.max_new_tokens) + ": the cache holds " + std::to_string(context) + " positions)"
      : g.weights >= g.work ? c.path + ": vocab_size, hidden_size, intermediate_size, num_hidden_layers"
                            : "--prompt (" + std::to_string(prompt_tokens) + " tokens) and " + c.path + ": vocab_size";
  throw InputError(fields, "generation would need about " + gib(g.total()) + " GiB (weights " + gib(g.weights) +
                               ", KV cache " + gib(g.cache) + ", work " + gib(g.work) + "), but " + gib((double)avail) +
                               " GiB are available (MemAvailable); ZF_SKIP_MEMORY_CHECK=1 skips this check");
}

// The tensor with the largest |value|, for the message on non-finite logits.
std::string largest_weight(const hf::HostTensors& w) {
  float big = 0;
  std::string name;
  for (const auto& [n, v] : w)
    for (float x : v)
      if (!(std::fabs(x) <= big)) big = std::fabs(x), name = n;  // NaN too
  char b[32];
  std::snprintf(b, sizeof b, "%g", (double)big);
  return name.empty() ? "" : "; the largest |weight| is " + std::string(b) + " in " + name;
}

int generate(const GenerateArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(a.model, ec)) throw InputError("--model " + a.model, "expected a model directory");
  if (a.max_new_tokens < 1 || a.max_new_tokens > (int64_t)1 << 30)
    throw InputError("--max-new-tokens", std::to_string(a.max_new_tokens) + ", expected an integer in [1, 2^30]");
  if (a.threads < 1 || a.threads > 1024)
    throw InputError("--threads", std::to_string(a.threads) + ", expected an integer in [1, 1024]");
  if (const std::string p = hf::sampling_problem(a.sampling); !p.empty())
    throw InputError(p.substr(0, p.find(':')), p.substr(p.find(':') + 2));
  const hf::Config c = hf::read_config((fs::path(a.model) / "config.json").string());
  const auto tok = tok::load_tokenizer(a.model);
  if (a.no_bos && a.tmpl == "chat")
    throw InputError("--no-bos", "not with --template chat: the chat template writes the BOS where it wants one");
  std::optional<ChatFormat> chat;
  if (a.tmpl == "chat") chat.emplace(load_chat_format(a.model));
  const std::string shown = model_prompt(a, chat ? &*chat : nullptr);
  const std::vector<int32_t> prompt = prompt_ids(a, shown, c, *tok, chat ? &*chat : nullptr);
  const bool random = a.init == "random";
  if (!random && !hf::has_weight_files(a.model)) hf::throw_no_weights(a.model, "--init random");
  const int64_t context = std::min<int64_t>(c.max_positions, (int64_t)prompt.size() + a.max_new_tokens - 1);
  check_generate_memory(a, c, std::max<int64_t>(context, (int64_t)prompt.size()), (int64_t)prompt.size());
  hf::GenerateOptions o;
  o.max_new_tokens = (int)a.max_new_tokens;
  o.sampling = a.sampling;
  o.seed = a.seed;
  o.eos = c.eos_token_ids;
  o.candidates = (int)std::min<uint64_t>((uint64_t)c.vocab_size, tok->vocab_size());
  o.allowed = allowed_ids(*tok, o.candidates, a.model);
  blas_single_thread();  // the helpers are the parallelism, as in a training run
  std::unique_ptr<HostHelpers> helpers;
  try {
    helpers = std::make_unique<HostHelpers>(a.threads - 1);
  } catch (const HelperStartError& e) {
    throw InputError("--threads " + std::to_string(a.threads),
                     std::string(e.what()) + ": expected at most the threads this process may start");
  }
  hf::LoadResult loaded;
  hf::HostTensors w = hf::load_host_tensors(
      a.model, c, random ? hf::InitFrom::random_init(a.init_seed) : hf::InitFrom::files(), &loaded);
  if (random)
    std::fprintf(stderr, "generate: --init random: initialised as Hugging Face does from --init-seed %llu (%s's "
                 "weights not read)\n", (unsigned long long)a.init_seed, a.model.c_str());
  const std::string largest = largest_weight(w);
  hf::CausalLM m(c, std::move(w), (int)std::max<int64_t>(context, (int64_t)prompt.size()));
  hf::TextStream text(*tok, std::vector<uint32_t>(prompt.begin(), prompt.end()));
  auto put = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  // the prompt goes out with the first token: logits that cannot be sampled at the prompt's end
  // fail before any output
  bool started = false;
  hf::GenerateResult r;
  try {
    r = hf::generate(m, prompt, o, [&](int32_t id) {
      if (!started) put(shown);
      started = true;
      put(text.push(id));
    });
  } catch (const hf::NonFiniteLogits& e) {
    if (started) put("\n");
    throw InputError(a.model + ": weights",
                     std::string(e.what()) + ": not finite (the weights overflow float32 arithmetic" + largest + ")");
  }
  put(text.finish() + "\n");
  const size_t n = r.tokens.size();
  std::fprintf(stderr,
               "generate: %zu prompt tokens, %zu new (stopped: %s); prefill %.3f s (%.1f tokens/s), decode %.3f s "
               "(%.1f tokens/s), %d threads; temperature %g, top-p %g, seed %llu\n",
               prompt.size(), n, hf::stop_name(r.stop), r.prefill_s, prompt.size() / std::max(r.prefill_s, 1e-9),
               r.decode_s, n > 1 ? (n - 1) / std::max(r.decode_s, 1e-9) : 0.0, a.threads, a.sampling.temperature,
               a.sampling.top_p, (unsigned long long)a.seed);
  return 0;
}

}  // namespace

int generate_main(int argc, char** argv) {
  CLI::App app{"zenflow-run generate: text sampled from a Hugging Face model directory (LlamaForCausalLM,\n"
               "Qwen2ForCausalLM, GPT2LMHeadModel; a --save-hf output too) on the host, with a KV cache.\n"
               "DIR holds config.json, model.safetensors (or an index and shards; --init random: Hugging\n"
               "Face's init from --init-seed instead) and tokenizer.json or tokenizer.model. The prompt gets\n"
               "config.json's BOS first (--template alpaca: the prompt is an instruction in Alpaca's\n"
               "template; --template chat: the user's message in tokenizer_config.json's chat_template,\n"
               "which writes its own BOS); generation stops at an eos_token_id, after --max-new-tokens, or at\n"
               "max_position_embeddings. stdout: the prompt and its continuation; stderr: tokens/s\n"
               "(docs/hf.md, \"Generation\").",
               "zenflow-run generate"};
  GenerateArgs a;
  // CLI11 reads "-1" into a uint64_t as 2^64 - 1, and 2^64 as 2^64 - 1: refused before the conversion
  const CLI::Validator kUnsigned = unsigned_64();
  app.add_option("--model", a.model, "model directory (config.json, weights, tokenizer)")->required();
  app.add_option("--prompt", a.prompt, "the text to continue (UTF-8)")->required();
  app.add_option("--max-new-tokens", a.max_new_tokens, "most tokens to generate, 1 to 2^30 (default 64)")
      ->check(integer_in(1, int64_t(1) << 30));
  app.add_option("--temperature", a.sampling.temperature,
                 "softmax temperature; 0 = greedy: the most probable token, the lowest id on ties (default 1)");
  app.add_option("--top-p", a.sampling.top_p,
                 "nucleus: sample among the most probable tokens whose mass reaches P, in (0, 1] (default 1: all)");
  app.add_option("--seed", a.seed, "the sampler's seed: the same seed gives the same text (default 0)")
      ->check(kUnsigned);
  app.add_option("--init", a.init, "random: Hugging Face's init from --init-seed, DIR's weights not read (default: "
                                  "read them; a directory without any is an error)")
      ->check(CLI::IsMember({"random"}));
  app.add_option("--init-seed", a.init_seed, "seed of --init random (default 0)")->check(kUnsigned);
  app.add_option("--threads", a.threads,
                 "threads for the kernels' tiles, 1 to 1024 (default 1; the same bits for any number)")
      ->check(integer_in(1, 1024));
  app.add_flag("--no-bos", a.no_bos, "no BOS token before the prompt");
  app.add_option("--template", a.tmpl, "alpaca: --prompt is an instruction, rendered in Stanford Alpaca's template "
                                       "(the one instruction data trains on: docs/finetune.md), the response follows; "
                                       "chat: --prompt is the user's message in the model's chat template "
                                       "(tokenizer_config.json's chat_template, as chat data trains on), with the "
                                       "assistant's turn opened")
      ->check(CLI::IsMember({"alpaca", "chat"}));
  app.add_option("--input", a.input, "--template alpaca: the instruction's input (its second template)");
  app.add_option("--system", a.system, "--template chat: a system message before --prompt");
  return parse_and_run(app, argc, argv, "generate", [&] { return generate(a); });
}

}  // namespace zf::tools
