// Batch loading: gathers rows of a uint8 image table into a float batch (pixel / 255) and their
// labels. Runs in the device context: on a GPU it is the batch's host-to-device transfer.
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

}  // namespace zf
