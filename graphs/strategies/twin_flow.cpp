#include "graphs/strategies/twin_flow.hpp"

#include <cstddef>

namespace zf {

TwinFlowSplit twin_flow_split(const std::vector<int64_t>& numels, double ratio, int64_t sub_group_size) {
  TwinFlowSplit s;
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  // sub-groups: one when sub_group_size >= the total; else closed at >= sub_group_size elements
  int64_t open = 0;  // elements in the sub-group being filled
  for (std::size_t i = 0; i < numels.size(); ++i) {
    s.sub_group.push_back(s.sub_groups);
    open += numels[i];
    if (sub_group_size < total && (open >= sub_group_size || i + 1 == numels.size())) {
      ++s.sub_groups;
      open = 0;
    }
  }
  if (sub_group_size >= total && !numels.empty()) s.sub_groups = 1;
  s.device_sub_groups = (int64_t)((1.0 - ratio) * (double)s.sub_groups);  // Python's int(): toward zero
  for (std::size_t i = 0; i < numels.size(); ++i) {
    s.on_device.push_back(s.sub_group[i] < s.device_sub_groups);
    (s.on_device.back() ? s.device_elems : s.host_elems) += numels[i];
  }
  return s;
}

}  // namespace zf
