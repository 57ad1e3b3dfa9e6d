// Token-id files (models/data/tokens.hpp): the format from the first 4 bytes and the path, the llm.c
// header's checks, the ids read at their width straight from the file, the range check.
#include "models/data/tokens.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "runtime/error.hpp"
#include "runtime/input_file.hpp"

namespace zf {
namespace {

const char* kFormats =
    "expected token ids: raw little-endian uint16 (nanoGPT's train.bin), raw uint32 for a path ending .u32.bin, "
    "or llm.c's .bin with its 1024-byte header (docs/gpt.md, \"Token files\")";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

int32_t le32(const uint8_t* p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

// n bytes at offset `at` into dst; the file must still hold them.
void read_exact(int fd, void* dst, int64_t n, int64_t at, const std::string& w) {
  auto* d = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, d, (size_t)std::min<int64_t>(n, 1 << 26), (off_t)at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw InputError(w, std::string("read error: ") + std::strerror(errno));
    if (r == 0) throw InputError(w, "the file became shorter while it was read (" + std::to_string(at) + " bytes)");
    d += r, at += r, n -= r;
  }
}

template <class T>
void read_ids(int fd, std::vector<T>& v, int64_t count, int64_t at, const std::string& w) {
  v.resize((size_t)count);
  read_exact(fd, v.data(), count * (int64_t)sizeof(T), at, w);
  if constexpr (std::endian::native == std::endian::big)
    for (T& x : v) {  // the file is little-endian
      T y = 0;
      for (size_t k = 0; k < sizeof(T); ++k) y = (T)(y << 8 | ((x >> (8 * k)) & 0xFF));
      x = y;
    }
}

// The format of a file of `size` bytes from its first bytes (head, up to the header's 12) and path.
void detect(TokenFile& t, const uint8_t* head, int64_t size, const std::string& path, const std::string& w,
            int64_t* count) {
  const int32_t magic = size >= 4 ? le32(head) : 0;
  if (magic == kLlmcMagicU16 || magic == kLlmcMagicU32) {
    const bool u16 = magic == kLlmcMagicU16;
    t.width = u16 ? 2 : 4;
    t.header_bytes = kLlmcHeaderBytes;
    t.format = u16 ? "llm.c uint16" : "llm.c uint32";
    const std::string m = std::to_string(magic), ids = u16 ? " uint16 ids" : " uint32 ids";
    if (size < kLlmcHeaderBytes)
      throw InputError(w, "truncated llm.c header: the file starts with llm.c's magic " + m + " but has " +
                              std::to_string(size) + " bytes, expected a 1024-byte header (256 int32) and the ids");
    const int32_t version = le32(head + 4), want = u16 ? kLlmcVersionU16 : kLlmcVersionU32;
    if (version != want)
      throw InputError(w, "bad llm.c header: version " + std::to_string(version) + " at byte offset 4, expected " +
                              std::to_string(want) + " (" + ids.substr(1) + ") after magic " + m);
    const int32_t n = le32(head + 8);
    if (n < 1)
      throw InputError(w, "bad llm.c header: token count " + std::to_string(n) +
                              " at byte offset 8, expected at least 1");
    const int64_t expect = kLlmcHeaderBytes + (int64_t)n * t.width;
    if (size < expect)
      throw InputError(w, "truncated: the llm.c header announces " + std::to_string(n) + ids + " (" +
                              std::to_string(expect) + " bytes with the header), the file has " +
                              std::to_string(size) + " bytes");
    if (size > expect)
      throw InputError(w, std::to_string(size - expect) + " bytes after the " + std::to_string(n) + ids +
                              " the llm.c header announces (expected a file of " + std::to_string(expect) +
                              " bytes)");
    *count = n;
    return;
  }
  t.width = ends_with(path, ".u32.bin") ? 4 : 2;
  t.format = t.width == 2 ? "raw uint16" : "raw uint32";
  if (size % t.width)
    throw InputError(w, t.width == 2 ? "odd byte count " + std::to_string(size) +
                                           ": a raw token file holds little-endian uint16 ids, 2 bytes each (a "
                                           "path ending .u32.bin: uint32 ids, 4 bytes each)"
                                     : "byte count " + std::to_string(size) +
                                           " is not a multiple of 4: a .u32.bin file holds little-endian uint32 "
                                           "ids, 4 bytes each");
  *count = size / t.width;
}

template <class T>
int64_t first_at_least(const std::vector<T>& v, int64_t vocab) {
  if (vocab > (int64_t)std::numeric_limits<T>::max()) return -1;
  const T lim = (T)vocab;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] >= lim) return (int64_t)i;
  return -1;
}

}  // namespace

TokenFile load_token_file(const std::string& path, const std::string& where, int64_t vocab, int64_t min_tokens) {
  const std::string w = where + ": " + path;
  const int fd = open_input_file(path, w);  // regular files only: a FIFO must not block
  TokenFile t;
  try {
    struct stat st;
    if (::fstat(fd, &st) != 0) throw InputError(w, std::string("cannot stat: ") + std::strerror(errno));
    const int64_t size = st.st_size;
    if (size == 0) throw InputError(w, std::string("empty file (") + kFormats + ")");
    uint8_t head[12] = {};
    read_exact(fd, head, std::min<int64_t>(size, sizeof head), 0, w);
    int64_t count = 0;
    detect(t, head, size, path, w, &count);
    if (t.width == 2)
      read_ids(fd, t.u16, count, t.header_bytes, w);
    else
      read_ids(fd, t.u32, count, t.header_bytes, w);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const int64_t bad = t.width == 2 ? first_at_least(t.u16, vocab) : first_at_least(t.u32, vocab);
  if (bad >= 0)
    throw InputError(w, "token id " + std::to_string(t.at(bad)) + " at byte offset " +
                            std::to_string(t.header_bytes + bad * t.width) + " (token " + std::to_string(bad) +
                            ") is not below the vocabulary, model.vocab = " + std::to_string(vocab) + " (" +
                            t.format + " file)");
  if (t.size() < min_tokens)
    throw InputError(w, std::to_string(t.size()) + " tokens (" + t.format + "): fewer than model.context + 1 = " +
                            std::to_string(min_tokens) + " (one window and its targets)");
  return t;
}

TokenSplit load_token_split(const std::string& train_path, const std::string& train_where,
                            const std::string& eval_path, const std::string& eval_where, int64_t vocab,
                            int context) {
  TokenSplit s;
  s.train = load_token_file(train_path, train_where, vocab, (int64_t)context + 1);
  s.val = load_token_file(eval_path, eval_where, vocab, (int64_t)context + 1);
  s.description = "tokens " + train_path + " (" + std::to_string(s.train.size()) + " ids, " + s.train.format +
                  "), eval " + eval_path + " (" + std::to_string(s.val.size()) + " ids, " + s.val.format + ")";
  return s;
}

}  // namespace zf
