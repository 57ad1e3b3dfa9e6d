// The IDX reader (gzip or plain): the first byte b splits the rest of the input at b / 255 of its
// length into the images file and the labels file of load_idx_pair (plain or gzip: zlib reads
// either).
#include <string>

#include "models/data/idx.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t rest = size - 1, cut = rest * data[0] / 255;
  const std::string img = zf::fuzz::scratch("images.idx"), lab = zf::fuzz::scratch("labels.idx");
  zf::fuzz::write(img, data + 1, cut);
  zf::fuzz::write(lab, data + 1 + cut, rest - cut);
  return zf::fuzz::expect_input_errors_only([&] {
    zf::ImageSet s = zf::load_idx_pair(img, lab, 0, 10);
    (void)s;
    zf::ImageSet t = zf::load_idx_pair(img, lab, 3, 10);  // train_limit
    (void)t;
  });
}
