// DeepSpeed's Twin-Flow split (ZeRO-Offload++, zero_optimization.offload_optimizer.ratio): which
// of zero-offload's parameters keep their optimizer state on the device (updated there every step
// by the device AdamW, as device-adam) and which on the host (updated by the host AdamW, as
// zero-offload). DeepSpeed's definition (deepspeed/runtime/zero/stage3.py, read, not copied):
//   - _create_fp16_sub_groups: the parameters, in model order, form sub-groups; a sub-group is
//     closed once it holds at least sub_group_size elements, or at the last parameter; when
//     sub_group_size >= the total, all parameters are one sub-group (so DeepSpeed's default 1e9
//     makes a smaller model one sub-group);
//   - _create_fp32_partitions: of the N sub-groups, sub-group i is on the cpu when
//     i >= int((1 - ratio) * N) (Python's truncation of a double), else on the accelerator: the
//     first floor((1 - ratio) * N) sub-groups stay on the device, the last ones go to the host.
//     ratio 1 (its default): all on the host; ratio 0: none.
// docs/spec.md, "Twin-Flow".
#pragma once
#include <cstdint>
#include <vector>

namespace zf {

struct TwinFlowSplit {
  std::vector<int64_t> sub_group;  // per parameter: its sub-group
  std::vector<bool> on_device;     // per parameter: its state on the device
  int64_t sub_groups = 0, device_sub_groups = 0;
  int64_t device_elems = 0, host_elems = 0;
};

// numels: the parameters' element counts in model order.
TwinFlowSplit twin_flow_split(const std::vector<int64_t>& numels, double ratio, int64_t sub_group_size);

}  // namespace zf
