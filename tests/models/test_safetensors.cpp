// safetensors I/O (models/formats/safetensors.hpp): round trip of several dtypes with metadata; the
// written file parsed by an independent reader (a Python 3 script using only json and struct,
// following the format description of huggingface/safetensors); malformed files rejected with a
// zf::InputError naming the file. write_file_atomic: tests/runtime/test_atomic_file.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/formats/safetensors.hpp"
#include "runtime/error.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using namespace zf::test;  // TempDir, Bytes, read_file, expect_input_error (test_helpers.hpp)

template <class T>
zf::StTensor tensor(const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
  zf::StTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// Sum of the values, in order, as double: the checksum the Python reader computes too.
double value_sum(const zf::StTensor& t) {
  double s = 0;
  auto add = [&](auto dummy) {
    using T = decltype(dummy);
    for (size_t i = 0; i < t.bytes.size() / sizeof(T); ++i) {
      T x;
      std::memcpy(&x, t.bytes.data() + i * sizeof(T), sizeof(T));
      s += (double)x;
    }
  };
  if (t.dtype == "F32") add(float{});
  if (t.dtype == "F64") add(double{});
  if (t.dtype == "I64") add(int64_t{});
  if (t.dtype == "I32") add(int32_t{});
  if (t.dtype == "U8") add(uint8_t{});
  return s;
}

zf::StFile sample_file() {
  zf::StFile f;
  f.metadata["format"] = "zenflow-test";
  f.metadata["note"] = "h\xc3\xa9llo, \"quoted\"";
  std::vector<float> w(2 * 3 * 5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * (float)i - 1.3f;
  f.tensors["layer.0.weight"] = zf::st_f32({2, 3, 5}, w.data());
  float b[7] = {1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f, 0.333f};
  f.tensors["layer.0.bias"] = zf::st_f32({7}, b);
  f.tensors["step"] = tensor<int64_t>("I64", {}, {123456789012345LL});
  f.tensors["perm"] = tensor<int64_t>("I64", {4}, {3, -1, 0, INT64_C(1) << 40});
  f.tensors["mask"] = tensor<uint8_t>("U8", {3, 3}, {0, 1, 2, 3, 250, 251, 252, 253, 255});  // 9 bytes: unaligned after
  f.tensors["moments"] = tensor<double>("F64", {2}, {1e-300, 2.5});
  f.tensors["counts"] = tensor<int32_t>("I32", {3}, {-7, 0, 2147483647});
  f.tensors["empty"] = tensor<float>("F32", {0, 4}, {});
  return f;
}

TEST(Safetensors, RoundTrip) {
  TempDir d;
  std::string p = d.path("w.safetensors");
  zf::StFile f = sample_file();
  zf::write_safetensors(p, f);
  zf::StFile g = zf::read_safetensors(p);
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(g.tensors.count(name));
    const zf::StTensor& u = g.tensors.at(name);
    EXPECT_EQ(u.dtype, t.dtype);
    EXPECT_EQ(u.shape, t.shape);
    EXPECT_EQ(u.bytes, t.bytes);  // bitwise, including -0.0 and denormal-range doubles
    EXPECT_EQ(u.numel(), t.numel());
  }
  EXPECT_EQ(g.tensors.at("layer.0.bias").as_f32()[1], -2.25f);
  EXPECT_EQ(g.tensors.at("step").numel(), 1u);  // shape [] is a scalar
  // the data section starts 8-byte aligned, as the reference writer does it
  Bytes raw = read_file(p);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= (uint64_t)raw[i] << (8 * i);
  EXPECT_EQ((8 + hlen) % 8, 0u);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"w.safetensors"});
}

TEST(Safetensors, NoMetadataNoTensors) {
  TempDir d;
  std::string p = d.path("empty.safetensors");
  zf::write_safetensors(p, zf::StFile{});
  zf::StFile g = zf::read_safetensors(p);
  EXPECT_TRUE(g.metadata.empty());
  EXPECT_TRUE(g.tensors.empty());
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  TempDir d;
  std::string p = d.path("x.safetensors");
  zf::StFile f;
  f.tensors["a"] = tensor<float>("F8_E5M2", {4}, {1.0f});  // a dtype the engine does not know
  EXPECT_THROW(zf::write_safetensors(p, f), zf::Error);
  f.tensors["a"] = tensor<float>("F32", {3}, {1.0f, 2.0f});
  EXPECT_THROW(zf::write_safetensors(p, f), zf::Error);
  EXPECT_TRUE(d.entries().empty());  // nothing written, no temporary left
}

// An independent reader: the format as documented by huggingface/safetensors, checked strictly
// (header length, JSON, dtypes, offsets contiguous and covering the data section), printing one
// line per tensor: name, dtype, shape, number of values and their sum (in file order, as double).
constexpr const char* kPyReader = R"PY(
import json, struct, sys
SIZES = {"F32": (4, "<f"), "F64": (8, "<d"), "I64": (8, "<q"), "I32": (4, "<i"), "U8": (1, "<B")}
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert 0 < n <= len(raw) - 8, "header length"
hdr = json.loads(raw[8:8 + n].decode("utf-8"))
assert isinstance(hdr, dict), "header not an object"
data = raw[8 + n:]
meta = hdr.pop("__metadata__", {})
assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"
for k in sorted(meta):
    print("meta", json.dumps(k), json.dumps(meta[k]))
spans = []
for name in sorted(hdr):
    t = hdr[name]
    assert set(t) == {"dtype", "shape", "data_offsets"}, name + ": keys"
    size, fmt = SIZES[t["dtype"]]
    b, e = t["data_offsets"]
    count = 1
    for s in t["shape"]:
        assert isinstance(s, int) and s >= 0, name + ": shape"
        count *= s
    assert 0 <= b <= e <= len(data) and e - b == count * size, name + ": offsets"
    spans.append((b, e))
    total = 0.0
    for (v,) in struct.iter_unpack(fmt, data[b:e]):
        total += float(v)
    print("tensor", json.dumps(name), t["dtype"], json.dumps(t["shape"], separators=(",", ":")), count, repr(total))
spans.sort()
pos = 0
for b, e in spans:
    assert b == pos, "hole or overlap at %d" % pos
    pos = e
assert pos == len(data), "data section not fully used"
print("ok")
)PY";

bool have_python3() { return std::system("python3 -c 'import json, struct' >/dev/null 2>&1") == 0; }

// Runs a command, returns its stdout; status in *rc.
std::string run_capture(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

TEST(Safetensors, IndependentPythonReader) {
  if (!have_python3()) GTEST_SKIP() << "python3 not available";
  TempDir d;
  std::string p = d.path("w.safetensors"), script = d.path("reader.py");
  std::ofstream(script) << kPyReader;
  zf::StFile f = sample_file();
  zf::write_safetensors(p, f);
  int rc = 0;
  std::string out = run_capture("python3 '" + script + "' '" + p + "' 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;

  std::istringstream in(out);
  std::string line;
  std::map<std::string, std::string> meta;
  std::map<std::string, std::vector<std::string>> seen;  // name -> dtype, shape, count, sum
  bool ok = false;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "meta") {
      std::string k, v;
      ls >> k;
      std::getline(ls, v);
      meta[nlohmann::json::parse(k).get<std::string>()] = nlohmann::json::parse(v).get<std::string>();
    } else if (kind == "tensor") {
      std::string name, dtype, shape, count, sum;
      ls >> name >> dtype >> shape >> count >> sum;
      seen[nlohmann::json::parse(name).get<std::string>()] = {dtype, shape, count, sum};
    } else if (kind == "ok") {
      ok = true;
    }
  }
  EXPECT_TRUE(ok) << out;
  EXPECT_EQ(meta, f.metadata) << out;
  ASSERT_EQ(seen.size(), f.tensors.size()) << out;
  for (auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(seen.count(name)) << out;
    auto& s = seen[name];
    EXPECT_EQ(s[0], t.dtype);
    EXPECT_EQ(nlohmann::json::parse(s[1]).get<std::vector<int64_t>>(), t.shape);
    EXPECT_EQ(std::stoull(s[2]), t.numel());
    // Python's repr() of a float round-trips exactly; both sides add in the same order
    EXPECT_EQ(std::strtod(s[3].c_str(), nullptr), value_sum(t)) << s[3];
  }
}

// The Python reader also accepts a file written to the reference layout by hand, so the check
// above is not merely the reader agreeing with itself on zenflow's output.
TEST(Safetensors, PythonReaderRejectsBrokenLayout) {
  if (!have_python3()) GTEST_SKIP() << "python3 not available";
  TempDir d;
  std::string script = d.path("reader.py");
  std::ofstream(script) << kPyReader;
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  Bytes good(8);
  good[0] = (uint8_t)h.size();
  good.insert(good.end(), h.begin(), h.end());
  float v[2] = {1.0f, 2.0f};
  good.insert(good.end(), (uint8_t*)v, (uint8_t*)v + 8);
  write_plain(d.path("good.st"), good);
  Bytes bad = good;
  bad.push_back(0);  // one unused byte at the end
  write_plain(d.path("bad.st"), bad);
  int rc = 0;
  std::string out = run_capture("python3 '" + script + "' '" + d.path("good.st") + "' 2>&1", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("tensor \"a\" F32 [2] 2 3.0"), std::string::npos) << out;
  out = run_capture("python3 '" + script + "' '" + d.path("bad.st") + "' 2>&1", &rc);
  EXPECT_NE(rc, 0) << out;
  // and zenflow's reader agrees on the good one
  zf::StFile f = zf::read_safetensors(d.path("good.st"));
  EXPECT_EQ(f.tensors.at("a").as_f32(), (std::vector<float>{1.0f, 2.0f}));
}

// Malformed files, built by hand: 8-byte little-endian header length, header, data.
class Malformed : public ::testing::Test {
 protected:
  std::string put(const std::string& name, const std::string& header, const Bytes& data, int64_t hlen = -1) {
    Bytes b(8);
    uint64_t n = hlen >= 0 ? (uint64_t)hlen : header.size();
    for (int i = 0; i < 8; ++i) b[i] = (uint8_t)(n >> (8 * i));
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), data.begin(), data.end());
    std::string p = dir_.path(name);
    write_plain(p, b);
    return p;
  }
  void expect_rejected(const std::string& p, std::initializer_list<std::string> parts) {
    SCOPED_TRACE(p);
    expect_input_error([&] { zf::read_safetensors(p); }, {p});
    expect_input_error([&] { zf::read_safetensors(p); }, parts);
  }
  TempDir dir_;
};

TEST_F(Malformed, AcceptsTheHandBuiltBaseline) {
  auto p = put("ok.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Bytes(8));
  EXPECT_EQ(zf::read_safetensors(p).tensors.at("a").shape, std::vector<int64_t>{2});
}

TEST_F(Malformed, HeaderLengthLargerThanFile) {
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_rejected(put("long.st", h, Bytes(8), 1000), {"header length 1000"});
  expect_rejected(put("huge.st", h, Bytes(8), INT64_MAX), {"header length"});
  expect_rejected(put("zero.st", h, Bytes(8), 0), {"header length 0"});
}

TEST_F(Malformed, TooShort) {
  std::string p = dir_.path("short.st");
  write_plain(p, Bytes{1, 0, 0});
  expect_rejected(p, {"too short"});
  std::string e = dir_.path("empty.st");
  write_plain(e, Bytes{});
  expect_rejected(e, {"too short"});
}

TEST_F(Malformed, HeaderNotJson) {
  expect_rejected(put("nojson.st", "{\"a\": {\"dtype\": \"F32\",", Bytes(8)), {"not valid JSON"});
  expect_rejected(put("binary.st", std::string("\x00\x01\x02\x03", 4), Bytes(8)), {"not valid JSON"});
  expect_rejected(put("array.st", "[1, 2]", Bytes(8)), {"must be a JSON object"});
}

TEST_F(Malformed, BadTensorEntries) {
  expect_rejected(put("notobj.st", R"({"a": 5})", {}), {"tensor 'a'", "expected an object"});
  expect_rejected(put("nodtype.st", R"({"a":{"shape":[2],"data_offsets":[0,8]}})", Bytes(8)), {"tensor 'a'", "dtype"});
  expect_rejected(put("shapestr.st", R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", Bytes(8)),
                  {"tensor 'a'", "shape"});
  expect_rejected(put("shapeneg.st", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", Bytes(8)),
                  {"tensor 'a'", "shape"});
  expect_rejected(put("offs1.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", Bytes(8)),
                  {"tensor 'a'", "data_offsets"});
  expect_rejected(put("offsneg.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", Bytes(8)),
                  {"tensor 'a'", "data_offsets"});
  expect_rejected(put("meta.st", R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Bytes(8)),
                  {"__metadata__.k", "expected a string"});
  expect_rejected(put("meta2.st", R"({"__metadata__":"x"})", {}), {"__metadata__"});
}

TEST_F(Malformed, DataOffsetsOutsideData) {
  expect_rejected(put("outside.st", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", Bytes(8)),
                  {"tensor 'a'", "data_offsets [0, 16]", "8-byte data section"});
  expect_rejected(put("reversed.st", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", Bytes(8)),
                  {"tensor 'a'", "data_offsets [8, 0]"});
  expect_rejected(put("far.st", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]}})", Bytes(8)),
                  {"tensor 'a'", "data_offsets"});
}

TEST_F(Malformed, OffsetsSizeNotMatchingShape) {
  expect_rejected(put("span.st", R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", Bytes(16)),
                  {"tensor 'a'", "span 12 bytes", "need 16"});
  expect_rejected(put("span64.st", R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})", Bytes(16)),
                  {"tensor 'a'", "need 16"});
}

TEST_F(Malformed, ShapeOverflow) {
  // 2^32 * 2^32 elements wrap to 0 in 64 bits: must not be taken for an empty tensor
  expect_rejected(put("wrap.st", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", {}),
                  {"tensor 'a'", "shape"});
  // 2^62 F32 elements: 2^64 bytes, also 0 in 64 bits
  expect_rejected(put("wrap2.st", R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", {}),
                  {"tensor 'a'", "shape"});
}

TEST_F(Malformed, UnsupportedDtype) {
  expect_rejected(put("f8.st", R"({"a":{"dtype":"F8_E5M2","shape":[8],"data_offsets":[0,8]}})", Bytes(8)),
                  {"tensor 'a'", "dtype F8_E5M2 is not supported"});
  expect_rejected(put("dtnum.st", R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", Bytes(4)),
                  {"tensor 'a'", "dtype"});
}

TEST_F(Malformed, OverlappingTensors) {
  expect_rejected(put("overlap.st",
                      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      Bytes(12)),
                  {"overlap"});
  expect_rejected(put("same.st",
                      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                      Bytes(8)),
                  {"overlap"});
}

TEST_F(Malformed, TruncatedFile) {
  std::string p = dir_.path("full.st");
  zf::write_safetensors(p, sample_file());
  Bytes full = read_file(p);
  for (size_t cut : {1, 4, 9, 64}) {
    SCOPED_TRACE(cut);
    std::string q = dir_.path("cut" + std::to_string(cut) + ".st");
    write_plain(q, Bytes(full.begin(), full.end() - (std::ptrdiff_t)cut));
    expect_rejected(q, {"data_offsets", "truncated"});
  }
  // cut inside the header
  std::string q = dir_.path("cut-header.st");
  write_plain(q, Bytes(full.begin(), full.begin() + 40));
  expect_rejected(q, {"header length"});
}

TEST_F(Malformed, MissingOrNotAFile) {
  std::string p = dir_.path("nope.safetensors");
  expect_rejected(p, {"cannot open"});
  std::string d = dir_.path("a-directory");
  fs::create_directory(d);
  expect_rejected(d, {"a-directory"});
}

TEST(WriteFileAtomic, SafetensorsOverwrite) {
  TempDir d;
  std::string p = d.path("w.safetensors");
  zf::StFile f = sample_file();
  zf::write_safetensors(p, f);
  zf::StFile g;
  float x[3] = {1, 2, 3};
  g.tensors["only"] = zf::st_f32({3}, x);
  zf::write_safetensors(p, g);
  zf::StFile r = zf::read_safetensors(p);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors.at("only").as_f32(), (std::vector<float>{1, 2, 3}));
  // a rejected write leaves the previous file intact
  zf::StFile bad;
  bad.tensors["x"] = tensor<float>("F8_E4M3", {4}, {1.0f});
  EXPECT_THROW(zf::write_safetensors(p, bad), zf::Error);
  EXPECT_EQ(zf::read_safetensors(p).tensors.count("only"), 1u);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"w.safetensors"});
}

}  // namespace
