// Batch loading: gathers rows of a uint8 image table into a float batch (pixel / 255) and their
// labels. Runs in the device context: on a GPU it is the batch's host-to-device transfer.
// Text batches (kernels/cpu/text.cpp): language-model windows of a byte text and rows of a padded
// sequence table, both as int32 tokens, and fixed token rows with their targets (models/lm_rows.hpp);
// start offsets and rows are checked before the gather.
#include <starpu.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct LoadHeader {
  const ByteTable* table;
  StepStatus* status;
  int32_t count;
  // followed by count int32 row indices
};

void load_batch_cpu(void* b[], void* a) noexcept {
  auto* h = static_cast<LoadHeader*>(a);
  const int32_t* idx = reinterpret_cast<const int32_t*>(h + 1);
  const ByteTable& t = *h->table;
  float* x = vec_ptr(b[0]);
  int32_t* y = vec_as<int32_t>(b[1]);
  const float inv = 1.0f / 255.0f;
  for (int32_t i = 0; i < h->count; ++i) {
    int64_t r = idx[i];
    if (r < 0 || r >= t.rows) {
      if (h->status) h->status->fail("load_batch: row " + std::to_string(r) + " out of range");
      return;
    }
    const uint8_t* src = t.data + r * t.cols;
    float* dst = x + (size_t)i * t.cols;
    for (int64_t j = 0; j < t.cols; ++j) dst[j] = (float)src[j] * inv;
    y[i] = t.labels[r];
  }
}

starpu_codelet& load_batch_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_load_batch", load_batch_cpu, nullptr /* host-side gather */, 2, {STARPU_W, STARPU_W}}, &m);
  return c;
}

}  // namespace

void insert_load_batch(const SubmitOptions& opt, const ByteTable* table,
                       const std::vector<int32_t>& indices, const Tensor& x, const Tensor& labels,
                       StepStatus* status) {
  const size_t B = indices.size();
  expect(B > 0 && x.numel() == B * (size_t)table->cols, opt,
         shape_str(x) + " must hold " + std::to_string(B) + " rows of " + std::to_string(table->cols));
  expect(labels.numel() == B, opt, shape_str(labels) + " must hold the batch's labels");
  std::vector<char> blob(sizeof(LoadHeader) + B * sizeof(int32_t));
  LoadHeader h{table, status, (int32_t)B};
  std::memcpy(blob.data(), &h, sizeof h);
  std::memcpy(blob.data() + sizeof h, indices.data(), B * sizeof(int32_t));
  TaskBuilder(load_batch_cl(), opt).w(x).w(labels).args_bytes(blob.data(), blob.size()).submit();
}

namespace {

struct WindowsHeader {
  const TextSource* text;
  StepStatus* status;
  int32_t B, T;
  // followed by B int64 start offsets
};

void load_windows_cpu(void* b[], void* a) noexcept {
  auto* h = static_cast<WindowsHeader*>(a);
  const int64_t* starts = reinterpret_cast<const int64_t*>(h + 1);
  for (int32_t i = 0; i < h->B; ++i)
    if (starts[i] < 0 || starts[i] + h->T >= h->text->size) {
      if (h->status) h->status->fail("load_windows: window at " + std::to_string(starts[i]) + " out of range");
      return;
    }
  int32_t* tokens = vec_as<int32_t>(b[0]);
  int32_t* targets = vec_as<int32_t>(b[1]);
  const uint8_t* d = h->text->data;
  if (h->text->width == 2)
    kernels::cpu::gather_windows(reinterpret_cast<const uint16_t*>(d), starts, h->B, h->T, tokens, targets);
  else if (h->text->width == 4)
    kernels::cpu::gather_windows(reinterpret_cast<const uint32_t*>(d), starts, h->B, h->T, tokens, targets);
  else
    kernels::cpu::gather_windows(d, starts, h->B, h->T, tokens, targets);
}

struct SequencesHeader {
  const SequenceTable* table;
  StepStatus* status;
  int32_t B;
  // followed by B int32 rows
};

void load_sequences_cpu(void* b[], void* a) noexcept {
  auto* h = static_cast<SequencesHeader*>(a);
  const int32_t* rows = reinterpret_cast<const int32_t*>(h + 1);
  const SequenceTable& t = *h->table;
  for (int32_t i = 0; i < h->B; ++i)
    if (rows[i] < 0 || rows[i] >= t.rows) {
      if (h->status) h->status->fail("load_sequences: row " + std::to_string(rows[i]) + " out of range");
      return;
    }
  kernels::cpu::gather_sequences(t.data, t.lengths, t.labels, t.T, rows, h->B, vec_as<int32_t>(b[0]),
                                 vec_as<int32_t>(b[1]), vec_as<int32_t>(b[2]));
}

struct ChunksHeader {
  const TextSource* text;
  StepStatus* status;
  int32_t B, T;
  // followed by B ChunkRefs
};

void load_chunks_cpu(void* b[], void* a) noexcept {
  auto* h = static_cast<ChunksHeader*>(a);
  const auto* refs = reinterpret_cast<const kernels::cpu::ChunkRef*>(h + 1);
  for (int32_t i = 0; i < h->B; ++i)
    if (refs[i].start < 0 || refs[i].n < 1 || refs[i].n > h->T || refs[i].start + refs[i].n > h->text->size) {
      if (h->status)
        h->status->fail("load_chunks: chunk at " + std::to_string(refs[i].start) + " of " +
                        std::to_string(refs[i].n) + " bytes out of range");
      return;
    }
  kernels::cpu::gather_chunks(h->text->data, refs, h->B, h->T, vec_as<int32_t>(b[0]), vec_as<int32_t>(b[1]),
                              vec_as<int32_t>(b[2]), vec_as<int32_t>(b[3]));
}

struct RowsHeader {
  const RowTable* rows;
  StepStatus* status;
  int32_t B;
  // followed by B int32 row indices
};

void load_rows_cpu(void* b[], void* a) noexcept {
  auto* h = static_cast<RowsHeader*>(a);
  const int32_t* idx = reinterpret_cast<const int32_t*>(h + 1);
  const RowTable& r = *h->rows;
  for (int32_t i = 0; i < h->B; ++i)
    if (idx[i] < 0 || idx[i] >= r.rows) {
      if (h->status) h->status->fail("load_rows: row " + std::to_string(idx[i]) + " out of range");
      return;
    }
  int32_t* tokens = vec_as<int32_t>(b[0]);   // (B, T)
  int32_t* targets = vec_as<int32_t>(b[1]);  // (B*T)
  const size_t T = (size_t)r.T;
  for (int32_t i = 0; i < h->B; ++i) {
    std::memcpy(tokens + i * T, r.tokens + (size_t)idx[i] * T, T * sizeof(int32_t));
    std::memcpy(targets + i * T, r.targets + (size_t)idx[i] * T, T * sizeof(int32_t));
  }
}

starpu_codelet& load_rows_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_load_rows", load_rows_cpu, nullptr /* host-side gather */, 2, {STARPU_W, STARPU_W}}, &m);
  return c;
}

starpu_codelet& load_chunks_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_load_chunks", load_chunks_cpu, nullptr /* host-side gather */, 4, {STARPU_W, STARPU_W, STARPU_W, STARPU_W}},
      &m);
  return c;
}

starpu_codelet& load_windows_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_load_windows", load_windows_cpu, nullptr /* host-side gather */, 2, {STARPU_W, STARPU_W}}, &m);
  return c;
}
starpu_codelet& load_sequences_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_load_sequences", load_sequences_cpu, nullptr /* host-side gather */,
                                          3, {STARPU_W, STARPU_W, STARPU_W}},
                                         &m);
  return c;
}

}  // namespace

void insert_load_windows(const SubmitOptions& opt, const TextSource* text, const std::vector<int64_t>& starts,
                         const Tensor& tokens, const Tensor& targets, StepStatus* status) {
  expect(tokens.shape().size() == 2 && tokens.dim(0) == (int64_t)starts.size(), opt,
         shape_str(tokens) + " must be (" + std::to_string(starts.size()) + ", T)");
  expect(targets.numel() == tokens.numel(), opt, shape_str(targets) + " vs " + shape_str(tokens));
  const int32_t B = (int32_t)starts.size(), T = (int32_t)tokens.dim(1);
  std::vector<char> blob(sizeof(WindowsHeader) + B * sizeof(int64_t));
  WindowsHeader h{text, status, B, T};
  std::memcpy(blob.data(), &h, sizeof h);
  std::memcpy(blob.data() + sizeof h, starts.data(), B * sizeof(int64_t));
  TaskBuilder(load_windows_cl(), opt).w(tokens).w(targets).args_bytes(blob.data(), blob.size()).submit();
}

void insert_load_rows(const SubmitOptions& opt, const RowTable* rows, const std::vector<int32_t>& idx,
                      const Tensor& tokens, const Tensor& targets, StepStatus* status) {
  const int32_t B = (int32_t)idx.size();
  expect(B > 0 && tokens.shape().size() == 2 && tokens.dim(0) == B && tokens.dim(1) == rows->T, opt,
         shape_str(tokens) + " must be (" + std::to_string(B) + ", " + std::to_string(rows->T) + ")");
  expect(targets.numel() == tokens.numel(), opt, shape_str(targets) + " vs " + shape_str(tokens));
  std::vector<char> blob(sizeof(RowsHeader) + B * sizeof(int32_t));
  RowsHeader h{rows, status, B};
  std::memcpy(blob.data(), &h, sizeof h);
  std::memcpy(blob.data() + sizeof h, idx.data(), B * sizeof(int32_t));
  TaskBuilder(load_rows_cl(), opt).w(tokens).w(targets).args_bytes(blob.data(), blob.size()).submit();
}

void insert_load_sequences(const SubmitOptions& opt, const SequenceTable* table, const std::vector<int32_t>& rows,
                           const Tensor& tokens, const Tensor& len, const Tensor& labels, StepStatus* status) {
  const int32_t B = (int32_t)rows.size();
  expect(B > 0 && tokens.shape().size() == 2 && tokens.dim(0) == B && tokens.dim(1) == table->T, opt,
         shape_str(tokens) + " must be (" + std::to_string(B) + ", " + std::to_string(table->T) + ")");
  expect(len.numel() == (size_t)B && labels.numel() == (size_t)B, opt,
         shape_str(len) + " and " + shape_str(labels) + " must hold B values");
  std::vector<char> blob(sizeof(SequencesHeader) + B * sizeof(int32_t));
  SequencesHeader h{table, status, B};
  std::memcpy(blob.data(), &h, sizeof h);
  std::memcpy(blob.data() + sizeof h, rows.data(), B * sizeof(int32_t));
  TaskBuilder(load_sequences_cl(), opt).w(tokens).w(len).w(labels).args_bytes(blob.data(), blob.size()).submit();
}

void insert_load_chunks(const SubmitOptions& opt, const TextSource* text, const std::vector<kernels::cpu::ChunkRef>& chunks,
                        const Tensor& tokens, const Tensor& targets, const Tensor& classes, const Tensor& labels,
                        StepStatus* status) {
  const int32_t B = (int32_t)chunks.size();
  expect(B > 0 && tokens.shape().size() == 2 && tokens.dim(0) == B, opt,
         shape_str(tokens) + " must be (" + std::to_string(B) + ", T)");
  expect(targets.numel() == tokens.numel(), opt, shape_str(targets) + " vs " + shape_str(tokens));
  expect(classes.numel() == (size_t)B && labels.numel() == (size_t)B, opt,
         shape_str(classes) + " and " + shape_str(labels) + " must hold B classes");
  for (const auto& c : chunks)
    expect(c.cls >= 0 && c.cls < 255 && c.label >= 0 && c.label < 255, opt,
           "chunk class " + std::to_string(c.cls) + ", label " + std::to_string(c.label));
  const int32_t T = (int32_t)tokens.dim(1);
  std::vector<char> blob(sizeof(ChunksHeader) + B * sizeof(kernels::cpu::ChunkRef));
  ChunksHeader h{text, status, B, T};
  std::memcpy(blob.data(), &h, sizeof h);
  std::memcpy(blob.data() + sizeof h, chunks.data(), B * sizeof(kernels::cpu::ChunkRef));
  TaskBuilder(load_chunks_cl(), opt)
      .w(tokens).w(targets).w(classes).w(labels)
      .args_bytes(blob.data(), blob.size())
      .submit();
}

}  // namespace zf
