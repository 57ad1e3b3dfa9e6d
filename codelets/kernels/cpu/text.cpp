// Batches of bytes as tokens (byte-level vocabulary of 256): language-model windows of a text (or
// of a token file's 2- or 4-byte ids) and rows of a padded sequence table (the classifier's
// verses), class-conditioned chunks of verses (the generative classifier).
#include <cstring>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

namespace {
template <class Id>
void gather(const Id* ids, const int64_t* starts, int B, int T, int32_t* tokens, int32_t* targets) {
  for (int b = 0; b < B; ++b) {
    const Id* s = ids + starts[b];
    int32_t* tk = tokens + (size_t)b * T;  // (T)
    int32_t* tg = targets + (size_t)b * T;
    for (int t = 0; t < T; ++t) {
      tk[t] = (int32_t)s[t];
      tg[t] = (int32_t)s[t + 1];
    }
  }
}
}  // namespace

void gather_windows(const uint8_t* text, const int64_t* starts, int B, int T, int32_t* tokens,
                    int32_t* targets) {
  gather(text, starts, B, T, tokens, targets);
}
void gather_windows(const uint16_t* ids, const int64_t* starts, int B, int T, int32_t* tokens, int32_t* targets) {
  gather(ids, starts, B, T, tokens, targets);
}
void gather_windows(const uint32_t* ids, const int64_t* starts, int B, int T, int32_t* tokens, int32_t* targets) {
  gather(ids, starts, B, T, tokens, targets);
}

void gather_rows(const int32_t* src_tokens, const int32_t* src_targets, int T, const int32_t* rows, int B,
                 int32_t* tokens, int32_t* targets) {
  for (int b = 0; b < B; ++b) {
    std::memcpy(tokens + (size_t)b * T, src_tokens + (size_t)rows[b] * T, (size_t)T * sizeof(int32_t));
    std::memcpy(targets + (size_t)b * T, src_targets + (size_t)rows[b] * T, (size_t)T * sizeof(int32_t));
  }
}

void gather_sequences(const uint8_t* table, const int32_t* lengths, const int32_t* labels, int T,
                      const int32_t* rows, int B, int32_t* tokens, int32_t* out_len, int32_t* out_labels) {
  for (int b = 0; b < B; ++b) {
    const uint8_t* r = table + (size_t)rows[b] * T;  // (T)
    int32_t* tk = tokens + (size_t)b * T;
    for (int t = 0; t < T; ++t) tk[t] = r[t];
    out_len[b] = lengths[rows[b]];
    out_labels[b] = labels[rows[b]];
  }
}

void gather_chunks(const uint8_t* text, const ChunkRef* chunks, int B, int T, int32_t* tokens, int32_t* targets,
                   int32_t* classes, int32_t* labels) {
  for (int b = 0; b < B; ++b) {
    const ChunkRef& c = chunks[b];
    const uint8_t* s = text + c.start;
    int32_t* tk = tokens + (size_t)b * T;
    int32_t* tg = targets + (size_t)b * T;
    tk[0] = 1 + c.cls;
    classes[b] = c.cls;
    labels[b] = c.label;
    for (int t = 1; t < c.n; ++t) tk[t] = s[t - 1];
    for (int t = c.n; t < T; ++t) tk[t] = 0;
    for (int t = 0; t < c.n; ++t) tg[t] = s[t];
    for (int t = c.n; t < T; ++t) tg[t] = -1;
  }
}

}  // namespace zf::kernels::cpu
