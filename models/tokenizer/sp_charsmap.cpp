#include "models/tokenizer/sp_charsmap.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/error.hpp"

namespace zf::tok {

namespace {

// darts-clone's DoubleArrayUnit, as libsentencepiece 0.1.97 (third_party/darts_clone) reads it
uint32_t unit_at(std::string_view trie, size_t i) {
  uint32_t u;
  std::memcpy(&u, trie.data() + 4 * i, 4);  // little-endian, as the library reads it on this host
  return u;
}
bool has_leaf(uint32_t u) { return ((u >> 8) & 1) == 1; }
uint32_t value(uint32_t u) { return u & ((1U << 31) - 1); }
uint32_t label(uint32_t u) { return u & ((1U << 31) | 0xFF); }
uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1U << 9)) >> 6); }

// Normalizer::kMaxTrieResultsSize: commonPrefixSearch counts every match on the path but stores
// only this many; NormalizePrefix then reads all it counted from that stack array
constexpr uint32_t kMaxResults = 32;

}  // namespace

void check_precompiled_charsmap(std::string_view blob, const std::string& where) {
  // Normalizer::DecodePrecompiledCharsMap: <trie size: uint32><trie: size/4 units><strings>
  uint32_t trie_bytes = 0;
  if (blob.size() <= 4) throw InputError(where, "expected a 4-byte trie size and a trie (" +
                                                    std::to_string(blob.size()) + " bytes)");
  std::memcpy(&trie_bytes, blob.data(), 4);
  // the library only asks trie size < blob size, then takes the trie after the 4 size bytes: a
  // size of blob - 4 .. blob - 1 reaches past the blob (a fuzz finding)
  if (trie_bytes > blob.size() - 4)
    throw InputError(where, "trie size " + std::to_string(trie_bytes) + " is more than the " +
                                std::to_string(blob.size() - 4) + " bytes after it in the charsmap");
  const std::string_view trie = blob.substr(4, trie_bytes);
  const std::string_view strings = blob.substr(4 + static_cast<size_t>(trie_bytes));
  const size_t n = trie.size() / 4;
  if (n == 0) throw InputError(where, "trie size " + std::to_string(trie_bytes) + ": expected at least one unit");
  auto fail = [&](const std::string& what) { throw InputError(where, what); };

  // Every node the search can reach, depth first. A node is a base B: the next input byte c reads
  // unit B^c, which must exist for every c (the input is arbitrary), and a unit whose label is c
  // leads on to the base its offset gives. darts-clone shares suffixes (a DAWG): many units may lead
  // to one base, so the walk keeps a color per base; a cycle is refused (a path through it could
  // stack matches without end), and best[B], the most leaves on a path from B, may not pass
  // kMaxResults.
  auto check_base = [&](uint32_t base) {
    if ((static_cast<size_t>(base) | 0xFF) >= n)
      fail("a trie offset leads to unit " + std::to_string(base) + ", beyond its " + std::to_string(n) +
           " units (expected an array that holds every byte's unit)");
  };
  struct Frame {
    uint32_t base, c = 0;
    uint32_t child = 0, leaf = 0;  // the edge being explored below this frame
    bool waiting = false;
  };
  std::vector<uint8_t> color(n, 0), best(n, 0);  // color: 0 unseen, 1 on the stack, 2 done
  const uint32_t root = offset(unit_at(trie, 0));  // commonPrefixSearch: node_pos ^= root's offset
  check_base(root);
  std::vector<Frame> stack{{root}};
  color[root] = 1;
  auto add = [&](uint32_t base, uint32_t leaves) {
    if (leaves > kMaxResults)
      fail("a path through the trie matches more than " + std::to_string(kMaxResults) + " rules");
    best[base] = static_cast<uint8_t>(std::max<uint32_t>(best[base], leaves));
  };
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.waiting) {  // the child below has its best
      f.waiting = false;
      add(f.base, f.leaf + best[f.child]);
    }
    if (f.c == 256) {
      color[f.base] = 2;
      stack.pop_back();
      continue;
    }
    const uint32_t c = f.c++;
    const uint32_t pos = f.base ^ c;
    const uint32_t u = unit_at(trie, pos);
    if (label(u) != c) continue;
    const uint32_t next = pos ^ offset(u);
    const uint32_t leaf = has_leaf(u) ? 1 : 0;
    if (leaf) {
      if (next >= n)
        fail("unit " + std::to_string(pos) + "'s leaf is unit " + std::to_string(next) + ", beyond its " +
             std::to_string(n) + " units");
      const uint32_t v = value(unit_at(trie, next));
      if (v >= strings.size() || std::memchr(strings.data() + v, 0, strings.size() - v) == nullptr)
        fail("a rule's replacement at byte " + std::to_string(v) + " of the " + std::to_string(strings.size()) +
             " bytes of strings is not a NUL-terminated string inside them");
    }
    check_base(next);
    if (color[next] == 1) fail("unit " + std::to_string(pos) + " leads back into its own path (expected no cycle)");
    if (color[next] == 2) {
      add(f.base, leaf + best[next]);
      continue;
    }
    f.child = next;
    f.leaf = leaf;
    f.waiting = true;
    color[next] = 1;
    stack.push_back({next});
  }
}

namespace {

// The protobuf wire format, only as far as finding two length-delimited fields needs.
struct Wire {
  std::string_view in;
  const std::string& path;
  size_t at = 0;
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(path, "byte " + std::to_string(at) + ": " + what + " (expected a sentencepiece model)");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= in.size()) fail("a truncated varint");
      const uint8_t b = static_cast<uint8_t>(in[at++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint longer than 10 bytes");
  }
  // The next field: its number and, for a length-delimited one, its bytes (others are skipped).
  bool next(uint32_t* field, std::string_view* bytes) {
    if (at >= in.size()) return false;
    const uint64_t key = varint();
    *field = static_cast<uint32_t>(key >> 3);
    *bytes = {};
    switch (key & 7) {
      case 0: varint(); break;
      case 1: skip(8); break;
      case 5: skip(4); break;
      case 2: {
        const uint64_t len = varint();
        if (len > in.size() - at) fail("a field longer than the rest of the model");
        *bytes = in.substr(at, len);
        at += len;
        break;
      }
      default: fail("wire type " + std::to_string(key & 7));
    }
    return true;
  }
  void skip(size_t k) {
    if (k > in.size() - at) fail("a truncated field");
    at += k;
  }
};

}  // namespace

void check_sentencepiece_normalizers(std::string_view model, const std::string& path) {
  // ModelProto: normalizer_spec = 3, denormalizer_spec = 5; NormalizerSpec: precompiled_charsmap = 2
  Wire top{model, path};
  uint32_t field;
  std::string_view bytes;
  while (top.next(&field, &bytes)) {
    if (field != 3 && field != 5) continue;
    const std::string spec = field == 3 ? "normalizer_spec" : "denormalizer_spec";
    Wire inner{bytes, path};
    std::string_view charsmap;
    uint32_t f;
    std::string_view b;
    while (inner.next(&f, &b))
      if (f == 2) charsmap = b;  // the last one wins, as in protobuf's parse
    if (!charsmap.empty()) check_precompiled_charsmap(charsmap, path + ": " + spec + ".precompiled_charsmap");
  }
}

}  // namespace zf::tok
