#include "runtime/nccl.hpp"

#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace zf {

const NcclApi* nccl_api(const char** error) {
  static std::string err;
  static const NcclApi* api = [] () -> const NcclApi* {  // once, thread-safe (static init)
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      err = std::string("cannot load NCCL (libnccl.so.2): ") + (e ? e : "not found") +
            "; put the CUDA toolkit's lib/ (or pip's nvidia/nccl/lib) on LD_LIBRARY_PATH";
      return nullptr;
    }
    static NcclApi a{};
    bool ok = true;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
      if (!f) ok = false, err = std::string("NCCL lacks ") + name;
    };
    sym(a.get_unique_id, "ncclGetUniqueId");
    sym(a.comm_init_rank, "ncclCommInitRank");
    sym(a.comm_destroy, "ncclCommDestroy");
    sym(a.all_reduce, "ncclAllReduce");
    sym(a.get_error_string, "ncclGetErrorString");
    sym(a.reduce, "ncclReduce");
    sym(a.broadcast, "ncclBroadcast");
    sym(a.group_start, "ncclGroupStart");
    sym(a.group_end, "ncclGroupEnd");
    sym(a.send, "ncclSend");
    sym(a.recv, "ncclRecv");
    return ok ? &a : nullptr;
  }();
  if (!api && error) *error = err.c_str();
  return api;
}

}  // namespace zf
