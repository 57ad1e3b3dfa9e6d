// The safetensors reader: input = a whole file (read_safetensors), then the tensors as
// --init would use them (F32 as floats).
#include <string>

#include "models/formats/safetensors.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zf::fuzz::scratch("in.safetensors");
  zf::fuzz::write(path, data, size);
  return zf::fuzz::expect_input_errors_only([&] {
    zf::StFile f = zf::read_safetensors(path);
    for (auto& [name, t] : f.tensors)
      if (t.dtype == "F32") (void)t.as_f32();
  });
}
