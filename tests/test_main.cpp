// main() of the StarPU test binaries: every test process gets its own STARPU_HOME, a fresh
// directory removed at exit. ctest runs the tests in parallel, one process per test; StarPU writes
// its calibration files (bus benchmark, performance models) without atomic renames, so processes
// sharing a home could read one half-written and abort (StarPU's check_bus_affinity_file).
// ZF_TEST_SHARED_STARPU_HOME=1 keeps the environment's STARPU_HOME (a serial run that should
// calibrate once, e.g. the CUDA tests in tools/zf, which measure the GPU bus).
// The homes are created under $ZF_TEST_STARPU_HOMES (tests/CMakeLists.txt), else the temp dir.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  namespace fs = std::filesystem;
  std::string home;
  const char* shared = std::getenv("ZF_TEST_SHARED_STARPU_HOME");
  if (!(shared && std::string(shared) == "1")) {
    const char* base_env = std::getenv("ZF_TEST_STARPU_HOMES");
    const fs::path base = base_env && *base_env ? fs::path(base_env) : fs::temp_directory_path();
    std::error_code ec;
    fs::create_directories(base, ec);
    std::string tmpl = (base / "starpu-home-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      std::perror(("mkdtemp " + tmpl).c_str());
      return 1;
    }
    home = tmpl;
    setenv("STARPU_HOME", home.c_str(), 1);
    unsetenv("STARPU_PERF_MODEL_DIR");  // it would take precedence over STARPU_HOME
  }
  const int rc = RUN_ALL_TESTS();
  if (!home.empty()) {
    std::error_code ec;
    fs::remove_all(home, ec);
  }
  return rc;
}
