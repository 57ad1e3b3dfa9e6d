// The memory a run will hold, estimated from the spec alone (before anything is allocated) and
// checked against the memory the machine has available: a spec whose every field is in range but
// whose size cannot fit (a 64 x 8192 GPT with context 8192, a 65536-wide MLP, 2^31 steps of
// per-step records) is refused with an InputError naming the fields that make it large, instead
// of growing for minutes or dying in std::bad_alloc. The parameters' and optimizer state's part
// counts the buffers the strategies allocate (per precision); the activations count the
// workload's buffers, not the libraries' scratch (docs/spec.md lists the components and what is
// left out). Printed in the run header.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zf {

struct Spec;

struct MemoryEstimate {
  // bytes
  double params = 0, optimizer = 0, activations = 0, records = 0, data = 0;
  // The device's part of them, per rank (zenflow-run --estimate-memory; the device memory check):
  // parameters' values (at ZeRO stage 3 this rank's shards and one block whole) and gradients (the
  // same), the strategy's device optimizer state, the activation buffers of the larger of the
  // training and the evaluation batch (StarPU may evict one set while the other runs; the
  // training batch alone in simulation, which skips the evaluation), the attention's scratch (a
  // CUDA worker's, or each CPU thread's: no (T, T) matrix, kernels/cpu/attention.cpp); the host's
  // part: its optimizer state, records, data. On a CPU device both are the same RAM, whose check
  // (check_memory) counts both batches' buffers (one set when they are the same size) and the attention
  // scratch of every thread that may run an attention tile (workspace).
  double device_params = 0, device_grads = 0, device_optimizer = 0, device_activations = 0, device_attention = 0;
  double device_activations_unchecked = 0;  // without activation checkpointing
  double workspace = 0;                     // the CPU threads' attention scratch
  double device_total() const {
    return device_params + device_grads + device_optimizer + device_activations + device_attention;
  }
  double host_total() const { return optimizer - device_optimizer + records + data; }
  int64_t param_count = 0;
  int64_t steps = -1;  // the steps the records were counted for (-1: unknown yet, not counted)
  double total() const { return params + optimizer + activations + workspace + records + data; }
  // "1.2 GiB (parameters 0.10, optimizer state 0.31, activations 0.52, per-step records 0.01, data 0.20)"
  std::string describe() const;
};

// steps: the run's total steps (-1 if not known yet, e.g. train.epochs before the data is read).
// ranks: data-parallel ranks (each holds its batch share of the activations).
MemoryEstimate estimate_memory(const Spec& spec, int64_t steps, int ranks = 1);

// {"ranks": R, "host": {...}, "device": {...}} in bytes per rank, each side with its "total", and the
// device's memory ("device_memory": a CUDA GPU's or the simulated machine's, null on a CPU device)
// and whether the device part fits in StarPU's 90 % of it (zenflow-run --estimate-memory)
std::string memory_estimate_json(const Spec& spec, const MemoryEstimate& e, int ranks);

// The device's memory in bytes: the first CUDA GPU's (cudaMemGetInfo's total), the simulated
// machine's GPU (ZF_SIM_GPU_MEM, tools/zf simulate), or -1 (a CPU device: its RAM, check_memory's)
double device_memory(const Spec& spec);

// Throws InputError (exit 2) when the device part exceeds 90 % of device_memory (StarPU's margin),
// naming the fields behind its largest part; ZF_SKIP_MEMORY_CHECK=1 skips it, as check_memory.
void check_device_memory(const Spec& spec, const MemoryEstimate& e);

// Bytes of memory available to a new allocation: MemAvailable of /proc/meminfo, else
// sysconf(_SC_AVPHYS_PAGES) x page size; -1 if neither is known.
int64_t available_memory();

// Throws InputError (exit 2) when the estimate exceeds the available memory, naming the spec
// fields behind its largest component. ZF_SKIP_MEMORY_CHECK=1 skips the check (the estimate is
// rough; for a machine whose swap or overcommit the user relies on).
void check_memory(const Spec& spec, const MemoryEstimate& e);

}  // namespace zf
