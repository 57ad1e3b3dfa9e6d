// zf-deadline: a StarPU 1.3 scheduling policy of ours (struct starpu_sched_policy), selected with
// runtime.sched / --sched "zf-deadline". One central queue per scheduling context:
//   host context   earliest deadline first: every task carries the step by which its result is
//                  needed (SubmitOptions::deadline(): for a ZenFlow host update the step after the
//                  merge that reads it), ties in submission order;
//   device context submission order with priorities (higher first, ties in submission order).
// Tasks StarPU submits itself (no deadline) go first. docs/architecture.md says what it knows that
// StarPU's own policies do not.
#pragma once
#include <starpu.h>

namespace zf {

starpu_sched_policy* deadline_policy();
// Orders the context's queue by deadline (call right after creating the context, before any task
// is submitted to it); contexts start ordered by priority.
void deadline_policy_order_by_deadline(unsigned sched_ctx);

}  // namespace zf
