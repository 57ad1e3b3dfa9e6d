// The KV-cache attention of generation (kernels::cpu::cached_attention, decode_attention.cpp;
// docs/hf.md "Generation") against the double reference's grouped-query attention
// (tests/reference/llama_ref.hpp) over the whole sequence: the first rows in one call (a
// prefill), the rest one row a call at pos0 = the rows before, group sizes 1 to 4; the cache's
// rows not yet written are NaN, so reading them would show.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/llama_ref.hpp"

namespace {

using namespace zf::test;

TEST(DecodeKernels, CachedAttentionMatchesReference) {
  for (auto [T, pre, H, Hkv, hs] : {std::tuple{1, 1, 1, 1, 4}, std::tuple{13, 5, 4, 2, 8}, std::tuple{22, 1, 3, 1, 5},
                                    std::tuple{70, 64, 8, 2, 16}, std::tuple{9, 9, 4, 4, 1}}) {
    SCOPED_TRACE("T=" + std::to_string(T) + " prefill=" + std::to_string(pre) + " H=" + std::to_string(H) +
                 " Hkv=" + std::to_string(Hkv) + " hs=" + std::to_string(hs));
    const size_t qw = (size_t)H * hs, kvw = (size_t)Hkv * hs;
    const std::vector<float> q = uniform(T * qw, -1, 1, 1 + T), k = uniform(T * kvw, -1, 1, 2 + T),
                             v = uniform(T * kvw, -1, 1, 3 + T);
    std::vector<float> out(T * qw, -9.0f), scratch(T);
    // the cache as it is when rows [0, n) are written: NaN after them, which must not be read
    auto cache = [&](const std::vector<float>& a, int n) {
      std::vector<float> c(a.size(), NAN);
      std::copy(a.begin(), a.begin() + (long)(n * kvw), c.begin());
      return c;
    };
    zf::kernels::cpu::cached_attention(q.data(), cache(k, pre).data(), cache(v, pre).data(), out.data(), scratch.data(),
                                       pre, 0, H, Hkv, hs);
    for (int t = pre; t < T; ++t)
      zf::kernels::cpu::cached_attention(q.data() + t * qw, cache(k, t + 1).data(), cache(v, t + 1).data(),
                                         out.data() + t * qw, scratch.data(), 1, t, H, Hkv, hs);
    const Vec qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    Vec ref(out.size()), att((size_t)H * T * T);
    zf::ref::gqa_attention_fwd(qd.data(), kd.data(), vd.data(), ref.data(), att.data(), 1, T, H, Hkv, hs);
    // as the GQA kernel's test: scores of hs products, a softmax of T terms, T more in the output
    EXPECT_TRUE(residual_ok(out.data(), ref.data(), out.size(), (double)(hs + 2 * T)));
  }
}

}  // namespace
