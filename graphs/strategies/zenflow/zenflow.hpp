// The zenflow strategy (docs/zenflow.md), private to graphs/strategies/zenflow/. The step builder
// submits tasks only; every ordering, including the bounded staleness, comes from data
// dependencies:
//   accumulate(t) -> acc[j % (D+1)] -RAW-> host AdamW of job j -WAR-> its result copy into the
//   same slot (res[j % (D+1)] instead with 2-byte crossings)
//   merge of job j at the boundary of job j + D -RAW-> waits for job j (the only place the
//   device can wait), and the next forward reads the merged weights (RAW).
//   A slot is reused by job j + D + 1, whose window starts after that merge is submitted (WAR),
//   so at most D+1 host jobs are in flight and no slot adds a wait (docs/zenflow.md, "Host memory").
// By concern: the calendar (calendar.hpp, pure), the ring and merges (ring.hpp, merge.cpp), the
// selection (selection.cpp), the update (update.cpp), state (state.cpp), metrics (metrics.cpp).
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "graphs/strategies/strategy.hpp"
#include "graphs/strategies/zenflow/calendar.hpp"
#include "graphs/strategies/zenflow/ring.hpp"

namespace zf::zenflow {  // private to graphs/strategies/zenflow/

struct Matrix {  // a 2-D weight and its ZenFlow state
  Param* p;
  int R, C, k;
  // device side; ZeRO stage 3: m_sel, v_sel hold this rank's shard's part of the selective moments
  // (selective_moments_capacity elements; docs/zenflow.md, "ZeRO stage 3")
  Tensor sel, imp, m_sel, v_sel;
  Tensor m_sel_host, v_sel_host;             // offload: selective moments kept on the host
  // precision bf16/fp16 with semantics zenflow: the fp32 master of the selected elements (m_sel's
  // shape; filled from the weight by the selective AdamW of a selection); x_sel_host with offload
  Tensor x_sel, x_sel_host;
  Tensor mass;                               // {sum|g|, sum|g[:, sel]|} of the last step (auto rule)
  HostTensor master, m, v, resync;           // host side
  HostTensor m2, v2;                         // semantics deepspeed with overlap_step: the second host moment set
  // rings of D+1: acc[s] holds a window's gradient sum, then (fp32) its job's result until merged;
  // res: the 2-byte results of precision bf16/fp16 (empty otherwise)
  std::vector<HostTensor> acc, res;
  // zenflow.accumulate_on "host" under bf16/fp16: the two slots (by update parity) the gradient
  // crosses into every step at 2 bytes, before a host task adds it into acc (empty otherwise)
  std::vector<HostTensor> down;
  double A = 0.0, N = 0.0;                   // auto rule
  double mass_host[2] = {0, 0};
  std::vector<std::vector<int32_t>> selections;  // read back at every selection (metrics)
  int64_t imp_reduced_at = -1;  // local-sum: the step whose importance was all-reduced before the gradient's collective
  // where the result of the host job in ring slot `slot` is copied and merged from
  const HostTensor& result(int64_t slot) const { return res.empty() ? acc[(size_t)slot] : res[(size_t)slot]; }
};

struct Vector {  // a 1-D parameter: device AdamW every step
  Param* p;
  Tensor m, v;  // ZeRO stage 3: this rank's shard's (at least one element)
  // precision bf16/fp16 with semantics zenflow: the fp32 master the device AdamW updates (m's
  // shape), of which the parameter is the rounded copy; empty otherwise
  Tensor master;
  // semantics deepspeed: the warm-up's moments (DeepSpeed's host moments of the parameter, one
  // set per parity under overlap_step; docs/zenflow.md)
  Tensor mw[2], vw[2];
  // semantics deepspeed with gradient_clipping: the window sums of g/K on the host, a ring of D+1
  // like the 2-D accumulators (DeepSpeed's clip norm counts them; docs/zenflow.md)
  std::vector<HostTensor> acc;
  std::vector<HostTensor> down;  // as Matrix::down, for acc
};

// Staleness of the merged host results (metrics and the trainer's summary).
struct StalenessSummary {
  double max = 0, mean = 0;
  int64_t max_intervals = 0, merges = 0;
};

class ZenFlowStrategy final : public Strategy {
 public:
  ZenFlowStrategy(Runtime& rt, std::vector<Param*> params, const Spec& spec, int64_t spe, const Comm* comm);
  const char* name() const override { return "zenflow"; }
  std::string describe() const override { return std::string(name()) + " (semantics " + spec_.zenflow.semantics + ")"; }

  void before_gradient_allreduce(const UpdateStep& u, const Comm& comm) override;     // selection.cpp
  void submit_gradient_collectives(const UpdateStep& u, const Comm& comm) override;   // selection.cpp
  void submit_update(const UpdateStep& u) override;                                   // update.cpp
  // Gradients streamed during the backward (graphs/train/grad_stream.hpp): the 2-D weights'. Their
  // layer's hook submits everything of the step that reads the device gradient (matrix_part).
  bool streams_gradient(const Param& p) const override { return p.is_matrix() && !stage3(); }
  void stream_gradient(const UpdateStep& u, const Param& p, const Comm* comm) override;  // update.cpp
  void flush(const UpdateStep& last) override;                                        // merge.cpp
  void add_metrics(nlohmann::json& m, int64_t steps) const override;                  // metrics.cpp
  StrategyReport report() const override;                                             // metrics.cpp
  // the selective moments and masters (device side, not zenflow.offload) and the 1-D parameters'
  // device moments and masters
  int64_t device_optimizer_bytes() const override {
    int64_t n = 0;
    for (const auto& w : mat_)
      n += z_.offload ? 0 : (int64_t)(w->m_sel.bytes() + w->v_sel.bytes() + w->x_sel.bytes());
    for (const Vector& v : vec_) n += (int64_t)(v.m.bytes() + v.v.bytes() + v.master.bytes());
    return n;
  }
  // zenflow.accumulate_on "device": the interval's fp32 accumulator, which the device's accumulate
  // tasks read-write (on a CUDA worker StarPU keeps its replica on the GPU until the host AdamW
  // reads it); 0 with "host"
  int64_t device_accumulator_bytes() const override {
    if (z_.accumulate_on_host()) return 0;
    int64_t n = 0;
    for (const auto& w : mat_) n += (int64_t)w->acc[0].bytes();
    for (const Vector& v : vec_)
      if (!v.acc.empty()) n += (int64_t)v.acc[0].bytes();
    return n;
  }
  std::vector<TraceEvent> trace_events(const std::vector<TaskRecord>& recs) const override;  // metrics.cpp
  void save_state(StateWriter& w) const override;                                     // state.cpp
  void load_state(const StateReader& r) override;                                     // state.cpp

 private:
  // zenflow.cpp: the state of each parameter
  void add_vector(Param* p);
  void add_matrix(Param* p);
  // selection.cpp: a weight's selection at step t (update o); stage 2: its selected columns completed
  void select_matrix(int64_t t, int64_t o, Matrix& w);
  // wire: the format of the all-reduce (the gradients' wire where the values are still its values)
  void allreduce_selected(int64_t t, Matrix& w, Wire wire);
  // local-sum: w's importance of this rank's local gradient, all-reduced (before its collective)
  void local_importance(const UpdateStep& u, Matrix& w, const Comm& comm);
  // update.cpp: the step's flags, once per step (the first weight's hook, or submit_update)
  void begin_step(const UpdateStep& u);
  // everything of step u that reads w's device gradient, in the order of the phases: crossing,
  // scales, selection, stage 2's selected columns, accumulation, selective AdamW, the auto mass
  void matrix_part(const UpdateStep& u, Matrix& w);
  void selective_update(int64_t t, int64_t o, Matrix& w);
  void prepare_gradients(const UpdateStep& u);  // the 1-D parameters' unscale and 1/K
  void accumulate(const UpdateStep& u, const Param& p, const HostTensor& acc, const std::vector<HostTensor>& down);
  void host_update(int64_t t, int64_t o);
  float clip_host(int64_t t, int64_t due, int64_t slot, float scale);
  void host_adam(int64_t t, int64_t o, int64_t due, int64_t slot, float scale);
  void vector_updates(int64_t t, int64_t o, bool select);
  bool auto_vote(int64_t t);
  // merge.cpp: a host result into the device weights (slot: its ring slot, -1: the master weights)
  void merge_all(int64_t t, int64_t slot, MergeEvent ev);
  void merge_job(int64_t t, int64_t o, int64_t slot);
  // ZeRO stage 3 (docs/zenflow.md, "ZeRO stage 3"): the device parameters are shards; each rank
  // updates the selected elements and the 1-D elements of its own shards
  bool stage3() const { return zero_stage() == 3; }
  // precision bf16/fp16 with semantics zenflow: every element the device updates (the selected
  // columns, the 1-D parameters) has an fp32 master, so no AdamW step is rounded away (semantics
  // deepspeed updates DeepSpeed's way, in the parameter's precision; docs/zenflow.md)
  bool masters() const { return bf16_ && !cal_.deepspeed(); }
  WeightShard shard(const Matrix& w) const;
  size_t shard_len(const Param& p) const;
  // state.cpp
  void load_tensors(const StateReader& r, bool selected, const std::deque<Pending>& pending);
  // stage 3: this rank's part `own` of a tensor of `numel` elements partitioned by `b` (empty: no
  // rank owns any), whole in the file (as at the other stages)
  void put_owned(StateWriter& w, const std::string& name, const Tensor& own, size_t numel,
                 const std::vector<size_t>& b, int64_t io) const;
  void get_owned(const StateReader& r, const std::string& name, const Tensor& own, size_t numel,
                 const std::vector<size_t>& b, StateReader::Values v, int64_t io) const;
  std::vector<size_t> moment_bounds(const Matrix& w) const;  // the shards' parts of the selective moments
  // metrics.cpp
  StalenessSummary staleness() const;

  Spec::ZenFlow z_;
  ZenFlowCalendar cal_;
  StalenessRing ring_;
  std::vector<std::unique_ptr<Matrix>> mat_;
  std::vector<Vector> vec_;
  int64_t u_ = 0;  // the auto rule's updates since its last vote for a host update
  bool selected_ = false, last_vote_ = false;
  // the next selective AdamW fills the selected columns' masters from the weights (a selection; a
  // resume from a checkpoint written without them)
  bool refill_ = false;
  // begin_step's: the step begun, whether it selects, whether the selective AdamW fills the masters
  int64_t begun_ = -1;
  bool select_ = false, fill_ = false;
  std::map<const Param*, Matrix*> by_param_;
  MergeLog log_;
};

}  // namespace zf::zenflow
