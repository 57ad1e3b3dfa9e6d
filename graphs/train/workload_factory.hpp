// The spec's workload: its model (MLP, GPT language model, GPT classifier) and its data, checked
// against the batch size.
#pragma once
#include <memory>

#include "graphs/spec/spec.hpp"

namespace zf {

class Workload;
class StepStatus;

// Builds the spec's workload (model + data). Needs a live Runtime.
std::unique_ptr<Workload> make_workload(const Spec& spec, StepStatus* status);

}  // namespace zf
