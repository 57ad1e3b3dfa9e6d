// Hugging Face model directories (models/hf/load.hpp, models/hf/save.hpp): read -> write -> read
// bitwise for F32, BF16 and F16, one file and sharded; config.json and the tokenizer files byte for
// byte; --save-dtype conversions; a random init from the seed only when asked for (no weights, a
// dangling symlink, a loop, a missing shard: errors naming them); every bad
// checkpoint (missing, extra, mis-shaped, non-finite tensor, truncated shard, bad index, weights in
// another format) refused naming the file and the tensor. Checkpoints are made by hand
// (hf_helpers.hpp), not by the writer under test; the written files are checked by parsing their
// headers independently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "models/hf/load.hpp"
#include "models/hf/save.hpp"
#include "models/hf_helpers.hpp"
#include "runtime/error.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using namespace zf::test;
using namespace zf::test::hf;

// name -> (dtype, raw bytes) of every tensor in a directory's safetensors files, read by parsing
// the headers here (not with the engine's reader).
// `written`: a file of save_dir's, its data section also aligned to 8 bytes as the reference
// writer aligns it.
std::map<std::string, std::pair<std::string, Bytes>> raw_tensors(const std::string& dir, bool written = false) {
  std::map<std::string, std::pair<std::string, Bytes>> out;
  for (auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    const Bytes b = read_file(e.path().string());
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= (uint64_t)b.at(i) << (8 * i);
    const json h = json::parse(std::string(b.begin() + 8, b.begin() + 8 + (long)n));
    EXPECT_EQ(h.at("__metadata__").at("format"), "pt") << e.path();
    if (written) {
      EXPECT_EQ((8 + n) % 8, 0u) << e.path() << ": data section not aligned to 8 bytes";
    }
    for (auto& [name, v] : h.items()) {
      if (name == "__metadata__") continue;
      const uint64_t s = v["data_offsets"][0], t = v["data_offsets"][1];
      out[name] = {v["dtype"], Bytes(b.begin() + 8 + (long)(n + s), b.begin() + 8 + (long)(n + t))};
    }
  }
  return out;
}

// Loads `in`, saves it to `out` with `o`, returns what the saved directory loads as.
Loaded round_trip(const std::string& in, const std::string& out, zf::hf::SaveOptions o, Loaded* first = nullptr) {
  Loaded a = load_dir(in);
  const zf::hf::Config c = zf::hf::read_config(in + "/config.json");
  if (o.input.empty()) o.input = a.result.dtypes;
  zf::hf::save_dir(out, c, [&](const zf::hf::TensorSpec& t) { return a.values.at(t.name).data(); }, o);
  if (first) *first = a;
  return load_dir(out);
}

void expect_same_raw(const std::string& a, const std::string& b) {
  const auto ra = raw_tensors(a), rb = raw_tensors(b, true);
  ASSERT_EQ(ra.size(), rb.size());
  for (auto& [name, v] : ra) {
    ASSERT_TRUE(rb.count(name)) << name;
    EXPECT_EQ(v.first, rb.at(name).first) << name;
    EXPECT_TRUE(v.second == rb.at(name).second) << name << ": bytes differ";
  }
}

struct Case {
  const char* family;
  json (*config)();
  const char* dtype;
  int shards;
};

class HfRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(HfRoundTrip, ReadWriteReadIsBitwise) {
  const Case k = GetParam();
  TempDir in, out_parent;
  write_model_dir(in, k.config(), random_tensors(k.config(), k.dtype, 7), k.shards);
  in.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}");
  in.write("tokenizer_config.json", "{}");
  in.write("chat_template.jinja", "{{ messages[0].content }}");
  in.write("unrelated.txt", "not copied");
  const std::string out = out_parent.path("saved");
  Loaded first;
  zf::hf::SaveOptions o;
  o.max_shard_bytes = k.shards > 1 ? 700 : uint64_t(2) << 30;  // forces several shards on a tiny model
  const Loaded second = round_trip(in.p.string(), out, o, &first);
  EXPECT_TRUE(first.result.from_files);
  EXPECT_EQ(first.result.files.size(), (size_t)k.shards);
  EXPECT_EQ(first_difference(first.values, second.values), "");
  EXPECT_EQ(first.values.size(), second.values.size());
  EXPECT_EQ(second.result.dtypes, first.result.dtypes);
  for (auto& [n, d] : second.result.dtypes) EXPECT_EQ(d, k.dtype) << n;
  // the stored bytes themselves, under the canonical names
  expect_same_raw(in.p.string(), out);
  // config.json byte for byte, hence every value; the tokenizer files copied, nothing else
  EXPECT_EQ(read_file(in.path("config.json")), read_file(out + "/config.json"));
  EXPECT_EQ(read_file(in.path("tokenizer.json")), read_file(out + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(out + "/tokenizer_config.json"));
  EXPECT_EQ(read_file(in.path("chat_template.jinja")), read_file(out + "/chat_template.jinja"));
  EXPECT_FALSE(fs::exists(out + "/unrelated.txt"));
  const bool sharded = fs::exists(out + "/model.safetensors.index.json");
  EXPECT_EQ(sharded, k.shards > 1);
  EXPECT_NE(fs::exists(out + "/model.safetensors"), sharded);
  if (sharded) {  // Hugging Face's index: every tensor once, total_size the sum of the data
    const json idx = json::parse(std::string((const char*)read_file(out + "/model.safetensors.index.json").data(),
                                             read_file(out + "/model.safetensors.index.json").size()));
    EXPECT_EQ(idx.at("weight_map").size(), first.values.size());
    uint64_t total = 0;
    for (auto& [n, v] : raw_tensors(out)) total += v.second.size();
    EXPECT_EQ(idx.at("metadata").at("total_size").get<uint64_t>(), total);
    EXPECT_GT(raw_tensors(out).size(), 1u);
    std::set<std::string> files;
    for (auto& [n, f] : idx.at("weight_map").items()) files.insert(f.get<std::string>());
    for (auto& f : files) EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
    char first[64];
    std::snprintf(first, sizeof first, "model-00001-of-%05zu.safetensors", files.size());
    EXPECT_TRUE(files.count(first)) << first;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, HfRoundTrip,
    ::testing::Values(Case{"llama", tiny_llama, "F32", 1}, Case{"llama", tiny_llama, "BF16", 1},
                      Case{"llama", tiny_llama, "BF16", 3}, Case{"qwen2", tiny_qwen2, "BF16", 2},
                      Case{"qwen2", tiny_qwen2, "F32", 2}, Case{"gpt2", tiny_gpt2, "F16", 1},
                      Case{"gpt2", tiny_gpt2, "F32", 3}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(i.param.family) + "_" + i.param.dtype + "_" + std::to_string(i.param.shards) + "files";
    });

// BF16 in, F32 out: the same values (bf16 -> fp32 is exact); F32 back to BF16: the original bytes
TEST(HfSave, DtypeConversions) {
  TempDir in, o1, o2;
  write_model_dir(in, tiny_llama(), random_tensors(tiny_llama(), "BF16", 3));
  zf::hf::SaveOptions f32;
  f32.dtype = zf::hf::save_dtype("f32", "--save-dtype");
  const Loaded a = load_dir(in.p.string());
  const Loaded b = round_trip(in.p.string(), o1.path("f32"), f32);
  EXPECT_EQ(first_difference(a.values, b.values), "");
  for (auto& [n, d] : b.result.dtypes) EXPECT_EQ(d, "F32") << n;
  zf::hf::SaveOptions bf16;
  bf16.dtype = zf::hf::save_dtype("bf16", "--save-dtype");
  round_trip(o1.path("f32"), o2.path("bf16"), bf16);
  expect_same_raw(in.p.string(), o2.path("bf16"));
  expect_input_error([] { zf::hf::save_dtype("fp8", "--save-dtype"); }, {"--save-dtype", "'fp8'", "f32, bf16 or f16"});
  // f16 cannot hold 1e5: refused before anything is written
  TempDir big, o3;
  auto ts = random_tensors(tiny_gpt2(), "F32", 1);
  const float huge = 1e5f;
  std::memcpy(ts[0].bytes.data() + 4 * 5, &huge, 4);
  write_model_dir(big, tiny_gpt2(), ts);
  zf::hf::SaveOptions f16;
  f16.dtype = "F16";
  expect_input_error([&] { round_trip(big.p.string(), o3.path("f16"), f16); },
                     {"f16: tensor 'transformer.wte.weight'", "element 5", "float16's range"});
  EXPECT_FALSE(fs::exists(o3.path("f16/config.json")));
}

TEST(HfSave, RefusesAnOccupiedDirectory) {
  TempDir in, out;
  write_model_dir(in, tiny_gpt2(), random_tensors(tiny_gpt2(), "F32", 1));
  out.write("keep.txt", "x");
  expect_input_error([&] { round_trip(in.p.string(), out.p.string(), {}); }, {out.p.string(), "not an empty directory"});
  EXPECT_EQ(out.entries(), std::vector<std::string>{"keep.txt"});
}

// A random init only when asked for: Hugging Face's init from the seed; the written directory reads
// back the same
TEST(HfLoad, RandomInitWhenAskedFor) {
  TempDir in, out;
  in.write("config.json", tiny_qwen2().dump());
  const Loaded a = load_dir(in.p.string(), true, 11), b = load_dir(in.p.string(), true, 11),
               c = load_dir(in.p.string(), true, 12);
  EXPECT_FALSE(a.result.from_files);
  EXPECT_EQ(first_difference(a.values, b.values), "");
  EXPECT_NE(first_difference(a.values, c.values), "");
  for (float x : a.values.at("model.layers.0.self_attn.q_proj.bias")) EXPECT_EQ(x, 0.0f);
  for (float x : a.values.at("model.norm.weight")) EXPECT_EQ(x, 1.0f);
  const zf::hf::Config cfg = zf::hf::read_config(in.path("config.json"));
  zf::hf::save_dir(out.path("s"), cfg, [&](const zf::hf::TensorSpec& t) { return a.values.at(t.name).data(); }, {});
  EXPECT_EQ(first_difference(a.values, load_dir(out.path("s")).values), "");
  in.write("pytorch_model.bin", "pickle");
  expect_input_error([&] { load_dir(in.p.string()); }, {"pytorch_model.bin", "format the engine does not read"});
}

// No weights file the reader recognises: an error listing what the directory holds and the names
// accepted, never a silent random init (issue 45); a random init reads no weight file at all
TEST(HfLoad, NoWeightsIsAnErrorNamingTheFilesFound) {
  TempDir d;
  d.write("config.json", tiny_qwen2().dump());
  d.write("tokenizer.json", "{}");
  expect_input_error([&] { load_dir(d.p.string()); },
                     {d.p.string() + ": no weights file the reader recognises", "found: config.json, tokenizer.json",
                      "accepted: model.safetensors, or model.safetensors.index.json", "model.init \"random\""});
  // a single shard without its index (renamed by hand, or the index not downloaded)
  write_plain(d.path("model-00001-of-00001.safetensors"), safetensors_bytes(random_tensors(tiny_qwen2(), "F32", 1)));
  expect_input_error([&] { load_dir(d.p.string()); },
                     {"found: config.json, model-00001-of-00001.safetensors, tokenizer.json",
                      "model-00001-of-00001.safetensors is read only through an index or as model.safetensors"});
  // model.init "random": the weights there are not read (an unreadable file is no error)
  d.write("model.safetensors", "not safetensors");
  const Loaded r = load_dir(d.p.string(), true, 3);
  EXPECT_FALSE(r.result.from_files);
  EXPECT_TRUE(r.result.files.empty());
  expect_input_error([&] { load_dir(d.p.string()); }, {d.path("model.safetensors")});
}

// Hugging Face's cache links model.safetensors to a blob: a dangling link or a loop is named, not
// taken for "no weights"; a shard the index lists and the directory lacks is named with the index
TEST(HfLoad, DanglingSymlinkLoopAndMissingShardAreNamed) {
  TempDir d;
  d.write("config.json", tiny_qwen2().dump());
  const std::string st = d.path("model.safetensors");
  fs::create_symlink(d.path("blobs/0123abcd"), st);
  expect_input_error([&] { load_dir(d.p.string()); },
                     {st + ": a dangling symlink to " + d.path("blobs/0123abcd"), "does not exist"});
  fs::remove(st);
  fs::create_symlink(st, st);  // a loop
  expect_input_error([&] { load_dir(d.p.string()); }, {st + ": a symlink loop"});
  fs::remove(st);
  TempDir s;
  write_model_dir(s, tiny_qwen2(), random_tensors(tiny_qwen2(), "BF16", 4), 2);
  const std::string shard = s.path("model-00002-of-00002.safetensors");
  fs::remove(shard);
  expect_input_error([&] { load_dir(s.p.string()); },
                     {shard + ": missing: " + s.path("model.safetensors.index.json") + "'s weight_map lists it",
                      "the directory has no such file"});
  fs::create_symlink(s.path("nowhere"), shard);
  expect_input_error([&] { load_dir(s.p.string()); }, {shard + ": a dangling symlink"});
}

// openai-community/gpt2's spelling: no "transformer." prefix, attn.bias buffers, a tied lm_head
TEST(HfLoad, CheckpointSpellings) {
  TempDir in;
  auto ts = random_tensors(tiny_gpt2(), "F32", 5);
  for (auto& t : ts) t.name = t.name.substr(std::string("transformer.").size());
  zf::Rng r(1);
  ts.push_back({"h.0.attn.bias", "F32", {1, 1, 12, 12}, random_bytes("F32", 144, r)});
  ts.push_back({"h.1.attn.masked_bias", "F32", {}, random_bytes("F32", 1, r)});
  ts.push_back({"lm_head.weight", "F32", {30, 8}, random_bytes("F32", 240, r)});
  write_model_dir(in, tiny_gpt2(), ts);
  const Loaded a = load_dir(in.p.string());
  EXPECT_EQ(a.values.size(), 2u + 24u + 2u);
  float w0;
  std::memcpy(&w0, ts[0].bytes.data(), 4);
  EXPECT_EQ(a.values.at("transformer.wte.weight")[0], w0);
  ts.push_back({"transformer.wte.weight", "F32", {30, 8}, ts[0].bytes});  // both spellings: two copies
  write_model_dir(in, tiny_gpt2(), ts);
  expect_input_error([&] { load_dir(in.p.string()); }, {"a second copy of 'transformer.wte.weight'"});
}

// Every bad tensor names the file and the tensor
TEST(HfLoad, RefusesBadTensors) {
  TempDir d;
  const std::string st = d.path("model.safetensors");
  auto ts = random_tensors(tiny_llama(), "BF16", 2);
  auto with = [&](const std::function<void(std::vector<RawTensor>&)>& edit) {
    auto v = ts;
    edit(v);
    write_model_dir(d, tiny_llama(), v);
    return [&] { load_dir(d.p.string()); };
  };
  expect_input_error(with([](auto& v) { v.erase(v.begin() + 3); }),
                     {st, "tensor 'model.layers.0.self_attn.k_proj.weight' missing", "[8, 16]"});
  zf::Rng r(3);
  expect_input_error(with([&](auto& v) { v.push_back({"model.layers.0.mlp.extra.weight", "BF16", {2}, random_bytes("BF16", 2, r)}); }),
                     {st + ": tensor 'model.layers.0.mlp.extra.weight'", "not a tensor of this LlamaForCausalLM"});
  expect_input_error(with([&](auto& v) { v.push_back({"model.layers.2.mlp.up_proj.weight", "BF16", {24, 16}, random_bytes("BF16", 384, r)}); }),
                     {"tensor 'model.layers.2.mlp.up_proj.weight'", "not a tensor"});
  expect_input_error(with([&](auto& v) { v[0].shape = {16, 40}; }),
                     {st + ": tensor 'model.embed_tokens.weight'", "shape [16, 40]", "needs [40, 16]"});
  expect_input_error(with([&](auto& v) { v[1].dtype = "I16"; }), {st, "model.layers.0.input_layernorm.weight", "I16"});
  expect_input_error(with([&](auto& v) { v[1].dtype = "U8", v[1].bytes.resize(16); }),
                     {st + ": tensor 'model.layers.0.input_layernorm.weight'", "dtype U8 (expected F32, BF16 or F16)"});
  expect_input_error(with([&](auto& v) { v[2].bytes[1] = 0x7f, v[2].bytes[0] = 0xc0; }),  // a bf16 NaN
                     {st + ": tensor 'model.layers.0.self_attn.q_proj.weight'", "element 0 is NaN"});
  // truncated: the last tensor's data cut short
  write_model_dir(d, tiny_llama(), ts);
  Bytes b = read_file(st);
  b.resize(b.size() - 10);
  write_plain(st, b);
  expect_input_error([&] { load_dir(d.p.string()); }, {st + ": tensor 'lm_head.weight'", "truncated"});
}

TEST(HfLoad, RefusesBadIndexAndShards) {
  TempDir d;
  const auto ts = random_tensors(tiny_qwen2(), "BF16", 4);
  const std::string idx = d.path("model.safetensors.index.json");
  const std::string s1 = d.path("model-00001-of-00002.safetensors"), s2 = d.path("model-00002-of-00002.safetensors");
  auto fresh = [&] { write_model_dir(d, tiny_qwen2(), ts, 2); };
  auto load = [&] { load_dir(d.p.string()); };
  fresh();
  EXPECT_NO_THROW(load());
  d.write("model.safetensors.index.json", "{\"metadata\": {}}");
  expect_input_error(load, {idx + ": weight_map", "expected an object"});
  d.write("model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": \"../x.safetensors\"}}");
  expect_input_error(load, {idx + ": weight_map.model.norm.weight", "'../x.safetensors'"});
  d.write("model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": 3}}");
  expect_input_error(load, {idx + ": weight_map.model.norm.weight", "shard file name"});
  d.write("model.safetensors.index.json", "{\"weight_map\": ");
  expect_input_error(load, {idx});
  // the index names a tensor its shard lacks; a shard holds one the index does not list
  fresh();
  json j = json::parse(std::string((const char*)read_file(idx).data(), read_file(idx).size()));
  j["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
  d.write("model.safetensors.index.json", j.dump());
  expect_input_error(load, {s1 + ": tensor 'model.layers.9.mlp.up_proj.weight'", "missing"});
  fresh();
  j = json::parse(std::string((const char*)read_file(idx).data(), read_file(idx).size()));
  j["weight_map"].erase("model.norm.weight");
  d.write("model.safetensors.index.json", j.dump());
  expect_input_error(load, {"tensor 'model.norm.weight'", "not in model.safetensors.index.json's weight_map"});
  // a shard missing, truncated inside its header, cut short in its data
  fresh();
  fs::remove(s2);
  expect_input_error(load, {s2});
  fresh();
  Bytes head = read_file(s2);
  head.resize(20);
  write_plain(s2, head);
  expect_input_error(load, {s2, "header length"});
  fresh();
  Bytes b = read_file(s1);
  b.resize(b.size() - 1);
  write_plain(s1, b);
  expect_input_error(load, {s1 + ": tensor", "outside the", "truncated"});
}

}  // namespace
