#include "capsim/core/pipeline_sim.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "capsim/core/layout.hpp"

namespace capsim {

using des::StreamKind;
using des::TaskKind;

std::string_view to_string(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::gpipe: return "gpipe";
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::interleaved: return "interleaved-1f1b";
    case PipelineSchedule::zb_h1: return "zb-h1";
    case PipelineSchedule::dualpipe: return "dualpipe";
  }
  return "?";
}

PipelineSchedule schedule_of(const TrainingPlan& t) {
  if (t.vpp.value_or(1) > 1) return PipelineSchedule::interleaved;
  switch (t.schedule) {
    case Schedule::gpipe: return PipelineSchedule::gpipe;
    case Schedule::zb_h1: return PipelineSchedule::zb_h1;
    case Schedule::dualpipe: return PipelineSchedule::dualpipe;
    case Schedule::one_f_one_b: return PipelineSchedule::one_f_one_b;
  }
  return PipelineSchedule::one_f_one_b;
}

std::vector<DualOp> dualpipe_order(int64_t pp, int64_t rank, int64_t m) {
  using K = DualOp::Kind;
  std::vector<DualOp> ops;
  const int64_t half = pp / 2;
  const int64_t hr = std::min(rank, pp - 1 - rank);  // distance from the nearer end
  const int64_t half_m = m / 2;
  const bool middle = hr == half - 1;
  // 1: forwards of phase 0 fill the pipeline.
  for (int64_t i = 0; i < (half - hr - 1) * 2; ++i) ops.push_back({K::forward, 0, 0});
  // 2: forwards of both phases alternate.
  for (int64_t i = 0; i < hr + 1; ++i) {
    ops.push_back({K::forward, 0, 0});
    ops.push_back({K::forward, 1, 0});
  }
  // 3: backward (input gradients) of phase 1, a deferred weight gradient, a forward.
  for (int64_t i = 0; i < half - hr - 1; ++i) {
    ops.push_back({K::backward_input, 1, 0});
    ops.push_back({K::weight, 0, 0});
    ops.push_back({K::forward, 1, 0});
  }
  // 4: the main loop of overlapped forward-backward pairs; the middle ranks run their
  // first pair apart.
  for (int64_t i = 0; i < half_m - pp + hr + 1; ++i) {
    if (i == 0 && middle) {
      ops.push_back({K::forward, 0, 0});
      ops.push_back({K::backward, 1, 0});
    } else {
      ops.push_back({K::forward_backward, 0, 1});
    }
    ops.push_back({K::forward_backward, 1, 0});
  }
  // 5: drain phase 1's backwards while pairing the last forwards.
  for (int64_t i = 0; i < half - hr - 1; ++i) {
    ops.push_back({K::backward, 1, 0});
    ops.push_back({K::forward_backward, 1, 0});
  }
  // 6: backwards of both phases; from the middle of the step on, weight gradients defer.
  bool zb = false;
  const int64_t s6 = hr + 1;
  for (int64_t i = 0; i < s6; ++i) {
    if (i == s6 / 2 && hr % 2 == 1) zb = true;
    ops.push_back({zb ? K::backward_input : K::backward, 1, 0});
    if (i == s6 / 2 && hr % 2 == 0) zb = true;
    ops.push_back({zb ? K::backward_input : K::backward, 0, 0});
  }
  // 7 and 8: the deferred weight gradients fill the drain.
  for (int64_t i = 0; i < half - hr - 1; ++i) {
    ops.push_back({K::weight, 0, 0});
    ops.push_back({K::backward_input, 0, 0});
  }
  for (int64_t i = 0; i < hr + 1; ++i) ops.push_back({K::weight, 0, 0});
  return ops;
}

std::vector<PipeOp> schedule_order(PipelineSchedule s, int64_t pp, int64_t vpp, int64_t rank, int64_t m,
                                   int64_t extra_warmup) {
  std::vector<PipeOp> ops;
  const TaskKind F = TaskKind::forward, B = TaskKind::backward, W = TaskKind::weight_grad;
  switch (s) {
    case PipelineSchedule::gpipe: {
      for (int64_t i = 0; i < m; ++i) ops.push_back({F, 0, i});
      for (int64_t i = m - 1; i >= 0; --i) ops.push_back({B, 0, i});
      break;
    }
    case PipelineSchedule::one_f_one_b: {
      const int64_t warm = std::min(pp - rank - 1 + extra_warmup, m);
      for (int64_t i = 0; i < warm; ++i) ops.push_back({F, 0, i});
      for (int64_t i = 0; i < m - warm; ++i) {
        ops.push_back({F, 0, warm + i});
        ops.push_back({B, 0, i});
      }
      for (int64_t i = m - warm; i < m; ++i) ops.push_back({B, 0, i});
      break;
    }
    case PipelineSchedule::zb_h1: {
      // 1F1B with the backward split into input (B) and weight (W) gradients; rank r runs
      // W of microbatch i after B of microbatch i + r, and the held-back W passes fill the
      // drain.
      const int64_t warm = std::min(pp - rank - 1, m);
      const int64_t delay = rank;
      int64_t next_w = 0, b_done = 0;
      auto after_b = [&]() {
        ++b_done;
        if (b_done - 1 - delay >= next_w && next_w < m) ops.push_back({W, 0, next_w++});
      };
      for (int64_t i = 0; i < warm; ++i) ops.push_back({F, 0, i});
      for (int64_t i = 0; i < m - warm; ++i) {
        ops.push_back({F, 0, warm + i});
        ops.push_back({B, 0, i});
        after_b();
      }
      for (int64_t i = m - warm; i < m; ++i) {
        ops.push_back({B, 0, i});
        after_b();
      }
      while (next_w < m) ops.push_back({W, 0, next_w++});
      break;
    }
    case PipelineSchedule::dualpipe:
      break;  // see dualpipe_order
    case PipelineSchedule::interleaved: {
      // Megatron-LM forward_backward_pipelining_with_interleaving: microbatches advance
      // in groups of pp through the model chunks; warm-up 2(pp - rank - 1) + (vpp - 1) pp.
      const int64_t total = m * vpp;
      auto fwd = [&](int64_t k) {
        return PipeOp{F, (k / pp) % vpp, (k / (pp * vpp)) * pp + k % pp};
      };
      auto bwd = [&](int64_t k) {
        return PipeOp{B, vpp - 1 - (k / pp) % vpp, (k / (pp * vpp)) * pp + k % pp};
      };
      const int64_t warm = std::min(2 * (pp - rank - 1) + (vpp - 1) * pp + extra_warmup, total);
      for (int64_t k = 0; k < warm; ++k) ops.push_back(fwd(k));
      for (int64_t k = 0; k < total - warm; ++k) {
        ops.push_back(fwd(warm + k));
        ops.push_back(bwd(k));
      }
      for (int64_t k = total - warm; k < total; ++k) ops.push_back(bwd(k));
      break;
    }
  }
  return ops;
}

namespace {

/// The results every simulated step reports, read off the run.
void summarise(DesStep& out, const DesOptions& dopt) {
  const des::Simulation& sim = out.sim;
  out.result = sim.run(dopt.progress);
  out.critical_path_bound_s = sim.critical_path();
  for (int32_t id : sim.critical_tasks()) {
    const des::Task& task = sim.tasks()[static_cast<size_t>(id)];
    const des::TaskTime& tt = out.result.times[static_cast<size_t>(id)];
    out.critical_path_s[std::string(des::to_string(task.kind))] += tt.end - tt.start;
  }
  const double step = out.result.makespan;
  out.busy_s.assign(static_cast<size_t>(sim.num_ranks()), 0.0);
  for (size_t k = 0; k < sim.tasks().size(); ++k) {
    const des::Task& task = sim.tasks()[k];
    const des::Stream& st = sim.streams()[static_cast<size_t>(task.stream)];
    if (st.kind == StreamKind::compute)
      out.busy_s[static_cast<size_t>(st.rank)] += out.result.times[k].end - out.result.times[k].start;
  }
  out.idle_s.resize(out.busy_s.size());
  for (size_t r = 0; r < out.busy_s.size(); ++r) out.idle_s[r] = step - out.busy_s[r];
  out.peak_activation_bytes = out.result.peak_memory;
  out.step.step_s = step;
}

/// DualPipe: two directions through the same pp stages, rank r holding stage r of the
/// forward direction and stage pp-1-r of the reverse one; m/2 microbatches each way.
DesStep simulate_dualpipe(const PipelineCosts& pc, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                          const StepOptions& opt, const DesOptions& dopt) {
  using K = DualOp::Kind;
  DesStep out;
  out.schedule = PipelineSchedule::dualpipe;
  des::Simulation& sim = out.sim;
  const int64_t pp = t.pp, m = num_microbatches(t), half_m = m / 2;
  std::vector<int32_t> compute(static_cast<size_t>(pp)), send(static_cast<size_t>(pp));
  for (int64_t r = 0; r < pp; ++r) {
    compute[static_cast<size_t>(r)] = sim.add_stream(static_cast<int32_t>(r), StreamKind::compute);
    send[static_cast<size_t>(r)] = sim.add_stream(static_cast<int32_t>(r), StreamKind::pp_comm);
  }
  const double link_bw = pc.p2p_s > 0 ? pc.p2p_bytes / pc.p2p_s : 0.0;
  // links[r][0]: r -> r+1, links[r][1]: r -> r-1
  std::vector<std::array<int32_t, 2>> links(static_cast<size_t>(pp));
  for (int64_t r = 0; r < pp; ++r) links[static_cast<size_t>(r)] = {sim.add_link(link_bw), sim.add_link(link_bw)};

  // Tasks by (direction, stage along it, microbatch).
  auto at = [&](int d, int64_t s, int64_t i) { return static_cast<size_t>((d * pp + s) * half_m + i); };
  const size_t slots = static_cast<size_t>(2 * pp * half_m);
  std::vector<int32_t> F(slots, -1), B(slots, -1), W(slots, -1);
  for (int64_t r = 0; r < pp; ++r) {
    const bool second = r >= pp / 2;
    auto dir = [&](int phase) { return phase ^ (second ? 1 : 0); };
    auto stage = [&](int d) { return d == 0 ? r : pp - 1 - r; };
    auto chunk = [&](int d) -> const ChunkCost& { return pc.chunks[static_cast<size_t>(r)][static_cast<size_t>(d)]; };
    int64_t fnext[2] = {0, 0}, bnext[2] = {0, 0};
    std::vector<std::pair<int, int64_t>> deferred;  // (direction, microbatch) awaiting W
    size_t w_next = 0;
    int32_t prev = -1;
    auto add = [&](des::Task task) {
      task.stream = compute[static_cast<size_t>(r)];
      const int32_t id = sim.add_task(task);
      if (prev >= 0) sim.add_edge(prev, id);
      prev = id;
      return id;
    };
    for (const DualOp& op : dualpipe_order(pp, r, m)) {
      des::Task task;
      if (op.kind == K::forward || op.kind == K::forward_backward) {
        const int d = dir(op.phase);
        const int64_t i = fnext[d]++;
        task.kind = TaskKind::forward;
        task.chunk = d;
        task.microbatch = static_cast<int32_t>(i);
        task.duration = chunk(d).fwd_s;
        task.mem_alloc = chunk(d).activation_bytes;
        if (op.kind == K::forward_backward) {
          const int db = dir(op.phase2);
          const ChunkCost& cb = chunk(db);
          const int64_t j = bnext[db]++;
          const ChunkCost& cf = chunk(d);
          // The pair hides each chunk's all-to-all behind the other's computation.
          const double pair = cf.fb_s > 0 ? cf.fb_s : cf.fwd_s + cb.bwd_s + cb.wgrad_s - 0.5 * (cf.ep_s + cb.ep_s);
          task.duration = pair;
          task.mem_free = cb.activation_bytes;
          const int32_t id = add(task);
          F[at(d, stage(d), i)] = id;
          B[at(db, stage(db), j)] = id;
          W[at(db, stage(db), j)] = id;
          continue;
        }
        F[at(d, stage(d), i)] = add(task);
      } else if (op.kind == K::backward || op.kind == K::backward_input) {
        const int d = dir(op.phase);
        const int64_t j = bnext[d]++;
        task.kind = TaskKind::backward;
        task.chunk = d;
        task.microbatch = static_cast<int32_t>(j);
        const bool whole = op.kind == K::backward;
        task.duration = chunk(d).bwd_s + (whole ? chunk(d).wgrad_s : 0.0);
        if (whole) task.mem_free = chunk(d).activation_bytes;
        const int32_t id = add(task);
        B[at(d, stage(d), j)] = id;
        if (whole) W[at(d, stage(d), j)] = id;
        else deferred.emplace_back(d, j);
      } else {
        const auto [d, j] = deferred.at(w_next++);
        task.kind = TaskKind::weight_grad;
        task.chunk = d;
        task.microbatch = static_cast<int32_t>(j);
        task.duration = chunk(d).wgrad_s;
        task.mem_free = chunk(d).activation_bytes;
        const int32_t id = add(task);
        W[at(d, stage(d), j)] = id;
        sim.add_edge(B[at(d, stage(d), j)], id);
      }
    }
    if (fnext[0] != half_m || fnext[1] != half_m || bnext[0] != half_m || bnext[1] != half_m || w_next != deferred.size())
      throw std::logic_error("DualPipe program does not cover every microbatch");
    // Optimizer after the last computation.
    des::Task o;
    o.kind = TaskKind::optimizer;
    double params = 0, cast = 0;
    for (const ChunkCost& ch : pc.chunks[static_cast<size_t>(r)]) {
      params += ch.params + ch.expert_params;
      cast += ch.weight_cast_s;
    }
    o.duration = (t.memory.offload_optimizer ? 0.0 : optimizer_step_seconds(cost, sys, params, t.optimizer, t.bf16_moments)) + cast;
    add(o);
  }
  // Data dependencies along each direction, through asynchronous sends.
  auto rank_of = [&](int d, int64_t s) { return d == 0 ? s : pp - 1 - s; };
  auto connect = [&](int32_t from, int32_t to, int64_t from_rank, int32_t link) {
    if (from == to) return;
    des::Task s;
    s.kind = TaskKind::send;
    s.stream = send[static_cast<size_t>(from_rank)];
    if (dopt.links && pc.p2p_s > 0) {
      s.bytes = pc.p2p_bytes;
      s.links = {link};
    } else {
      s.duration = pc.p2p_s;
    }
    const int32_t id = sim.add_task(s);
    sim.add_edge(from, id);
    sim.add_edge(id, to);
  };
  for (int d = 0; d < 2; ++d)
    for (int64_t i = 0; i < half_m; ++i)
      for (int64_t s = 0; s < pp; ++s) {
        const int64_t r = rank_of(d, s);
        const int toward_next = d == 0 ? 0 : 1;  // forward direction 0 goes r -> r+1
        if (s + 1 < pp) connect(F[at(d, s, i)], F[at(d, s + 1, i)], r, links[static_cast<size_t>(r)][static_cast<size_t>(toward_next)]);
        if (s > 0) connect(B[at(d, s, i)], B[at(d, s - 1, i)], r, links[static_cast<size_t>(r)][static_cast<size_t>(1 - toward_next)]);
        if (F[at(d, s, i)] != B[at(d, s, i)]) sim.add_edge(F[at(d, s, i)], B[at(d, s, i)]);
      }
  (void)opt;
  summarise(out, dopt);
  return out;
}

}  // namespace

DesStep simulate_pipeline(const PipelineCosts& pc, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                          const StepOptions& opt, const DesOptions& dopt) {
  if (schedule_of(t) == PipelineSchedule::dualpipe) return simulate_dualpipe(pc, sys, t, cost, opt, dopt);
  DesStep out;
  out.schedule = schedule_of(t);
  const int64_t pp = t.pp, vpp = t.vpp.value_or(1), mb = num_microbatches(t);
  const int64_t stages = pp * vpp;
  const bool split_w = out.schedule == PipelineSchedule::zb_h1;
  // Megatron-LM's non-interleaved 1F1B and GPipe send and receive synchronously: the
  // transfer occupies the compute stream. Interleaved and zero-bubble schedules overlap it.
  const bool blocking_p2p = out.schedule == PipelineSchedule::one_f_one_b || out.schedule == PipelineSchedule::gpipe;
  const int zero = t.zero.value_or(0);
  const LayoutGroups groups = layout_groups(t, sys.gpus_per_node);
  const double g_bytes = grad_bytes(t);

  des::Simulation& sim = out.sim;
  std::vector<int32_t> compute(static_cast<size_t>(pp)), send(static_cast<size_t>(pp)), dpst(static_cast<size_t>(pp));
  for (int64_t r = 0; r < pp; ++r) {
    compute[static_cast<size_t>(r)] = sim.add_stream(static_cast<int32_t>(r), StreamKind::compute);
    send[static_cast<size_t>(r)] = sim.add_stream(static_cast<int32_t>(r), StreamKind::pp_comm);
    dpst[static_cast<size_t>(r)] = sim.add_stream(static_cast<int32_t>(r), StreamKind::dp_comm);
  }
  // One link per direction between pipeline neighbours (forward activations r -> r+1,
  // backward gradients r+1 -> r), at the rate that reproduces the cost model's transfer.
  std::vector<int32_t> fwd_link(static_cast<size_t>(pp)), bwd_link(static_cast<size_t>(pp));
  const double link_bw = pc.p2p_s > 0 ? pc.p2p_bytes / pc.p2p_s : 0.0;
  if (pp > 1)
    for (int64_t r = 0; r < pp; ++r) {
      fwd_link[static_cast<size_t>(r)] = sim.add_link(link_bw);
      bwd_link[static_cast<size_t>(r)] = sim.add_link(link_bw);
    }

  auto collective = [&](CollectiveKind kind, double bytes_per_param, double params, double experts) {
    return cost.collective(kind, Bytes(params * bytes_per_param), groups.dp).value +
           cost.collective(kind, Bytes(experts * bytes_per_param), groups.dp_expert).value;
  };
  // Parameter all-gathers: 16-bit, FP8 weights one byte (fp8_params()).
  const bool fp8 = fp8_params(t);
  auto gather = [&](double params, double fp8_params, double experts) {
    return cost.collective(CollectiveKind::all_gather, Bytes(param_gather_bytes(fp8, params, fp8_params, 0.0)), groups.dp).value +
           cost.collective(CollectiveKind::all_gather, Bytes(param_gather_bytes(fp8, 0.0, 0.0, experts)), groups.dp_expert).value;
  };
  const bool fsdp = zero >= 3 && pp == 1;
  const bool dp_active = groups.dp.size > 1 || groups.dp_expert.size > 1;

  // Which operation of each chunk is its first forward and its last backward-side pass
  // (gradients of the whole step are ready after it).
  std::vector<std::vector<PipeOp>> orders(static_cast<size_t>(pp));
  // Megatron-Core's batch-level expert-parallel overlap warms up one forward further and
  // runs each steady-state backward together with the forward before it.
  const bool ep_pairs = ep_overlap_on(t);
  for (int64_t r = 0; r < pp; ++r)
    orders[static_cast<size_t>(r)] = schedule_order(out.schedule, pp, vpp, r, mb, ep_pairs ? 1 : 0);
  auto is_last_backward = [&](const PipeOp& op, int64_t r) {
    if (op.kind == TaskKind::forward || (split_w && op.kind == TaskKind::backward)) return false;
    const auto& ord = orders[static_cast<size_t>(r)];
    for (auto it = ord.rbegin(); it != ord.rend(); ++it)
      if (it->chunk == op.chunk && it->kind == op.kind) return *it == op;
    return false;
  };
  auto is_first_forward = [&](const PipeOp& op, int64_t r) {
    if (op.kind != TaskKind::forward) return false;
    for (const PipeOp& o : orders[static_cast<size_t>(r)])
      if (o.chunk == op.chunk && o.kind == TaskKind::forward) return o == op;
    return false;
  };

  // Compute tasks, indexed by (virtual stage j, microbatch): first and last piece of each
  // operation (operations split into pieces where communication interleaves with them).
  auto idx = [&](int64_t j, int64_t i) { return static_cast<size_t>(j * mb + i); };
  const size_t slots = static_cast<size_t>(stages * mb);
  std::vector<int32_t> Fs(slots, -1), Fe(slots, -1), Bs(slots, -1), Be(slots, -1), Ws(slots, -1), We(slots, -1);
  std::vector<std::vector<int32_t>> program(static_cast<size_t>(pp));
  std::vector<int32_t> prev_dp(static_cast<size_t>(pp), -1);
  auto dp_task = [&](int64_t r, TaskKind kind, double seconds, int32_t chunk) {
    des::Task d;
    d.kind = kind;
    d.stream = dpst[static_cast<size_t>(r)];
    d.chunk = chunk;
    d.duration = seconds;
    const int32_t id = sim.add_task(d);
    if (prev_dp[static_cast<size_t>(r)] >= 0) sim.add_edge(prev_dp[static_cast<size_t>(r)], id);
    prev_dp[static_cast<size_t>(r)] = id;
    return id;
  };
  for (int64_t r = 0; r < pp; ++r) {
    auto& prog = program[static_cast<size_t>(r)];
    // Steady-state backwards follow a forward after the warm-up's ones.
    const PipeOp* prev_op = nullptr;
    const int64_t warm = ep_pairs ? ep_overlap_warmup(pp, vpp, r, mb) : 0;
    int64_t forwards = 0;
    for (const PipeOp& op : orders[static_cast<size_t>(r)]) {
      const int64_t j = op.chunk * pp + r;
      const ChunkCost& ch = pc.chunks[static_cast<size_t>(r)][static_cast<size_t>(op.chunk)];
      double seconds = 0, alloc = 0, free = 0;
      if (op.kind == TaskKind::forward) {
        seconds = ch.fwd_s + (blocking_p2p && j < stages - 1 ? pc.p2p_s : 0.0);
        alloc = ch.activation_bytes;
        ++forwards;
      } else if (op.kind == TaskKind::backward) {
        seconds = ch.bwd_s + (split_w ? 0.0 : ch.wgrad_s) + (blocking_p2p && j > 0 ? pc.p2p_s : 0.0);
        if (!split_w) free = ch.activation_bytes;
        if (ep_pairs && prev_op && prev_op->kind == TaskKind::forward && forwards > warm) {
          // Paired with the forward just before it: the pair saves half of what each chunk's
          // own pairing does (ChunkCost::ep_pair_saved_s), taken off the backward.
          const ChunkCost& cf = pc.chunks[static_cast<size_t>(r)][static_cast<size_t>(prev_op->chunk)];
          seconds -= (cf.ep_pair_saved_s + ch.ep_pair_saved_s) / 2.0;
        }
      } else {
        seconds = ch.wgrad_s;
        free = ch.activation_bytes;
      }
      // Pieces: per layer under FSDP (a gather before each, a reduce-scatter after each
      // backward one); per gradient bucket for the chunk's last backward and first forward
      // when data-parallel communication overlaps them (Megatron-LM buckets of
      // max(40M, 1M x dp) elements, at most one per layer).
      // The chunk that holds the input embedding ends with the embedding's bucket
      // (grad_buckets): the last to reduce, the first to gather.
      const double bucket = dp_bucket_elems(t, groups.dp.size);
      const bool emb = ch.embedding_params > 0;
      const GradBuckets eb = emb ? grad_buckets(ch.params, ch.embedding_params, bucket, ch.layers)
                                 : grad_buckets(ch.params + ch.expert_params, 0.0, bucket, ch.layers);
      const int64_t buckets = eb.count;
      int64_t pieces = 1;
      enum class Comm { none, sharded, reduce, param_gather } comm = Comm::none;
      if (dp_active && fsdp && op.kind != TaskKind::weight_grad) {
        pieces = std::max<int64_t>(1, ch.layers);
        comm = Comm::sharded;
      } else if (dp_active && !fsdp && opt.overlap_dp && is_last_backward(op, r)) {
        pieces = buckets;
        comm = Comm::reduce;
      } else if (dp_active && !fsdp && opt.overlap_dp && zero >= 1 && is_first_forward(op, r)) {
        pieces = buckets;
        comm = Comm::param_gather;
      }
      const double np = static_cast<double>(pieces);
      int32_t first = -1, last = -1;
      for (int64_t k = 0; k < pieces; ++k) {
        des::Task task;
        task.kind = op.kind;
        task.stream = compute[static_cast<size_t>(r)];
        task.chunk = static_cast<int32_t>(op.chunk);
        task.microbatch = static_cast<int32_t>(op.microbatch);
        task.duration = seconds / np;
        if (k == 0) task.mem_alloc = alloc;
        if (k == pieces - 1) task.mem_free = free;
        const int32_t id = sim.add_task(task);
        // Under FSDP the unit holding the input embedding is a forward's first gather and a
        // backward's last reduction: at least the table (analytical_step).
        const bool edge = emb && ch.embedding_params > ch.params / np &&
                          ((op.kind == TaskKind::forward && k == 0) || (op.kind == TaskKind::backward && k == pieces - 1));
        const double unit = edge ? ch.embedding_params : ch.params / np;
        const double unit_fp8 = ch.params > 0 ? ch.fp8_params * unit / ch.params : 0.0;
        if (comm == Comm::sharded) {
          // Gather this layer's weights, one layer ahead of the compute that needs them.
          const int32_t ag = dp_task(r, TaskKind::gather, gather(op.kind == TaskKind::forward ? unit : ch.params / np,
                                                                 op.kind == TaskKind::forward ? unit_fp8 : ch.fp8_params / np,
                                                                 ch.expert_params / np),
                                     task.chunk);
          if (prog.size() >= 2) sim.add_edge(prog[prog.size() - 2], ag);
          sim.add_edge(ag, id);
        } else if (comm == Comm::param_gather) {
          // The forward gathers the embedding's bucket first.
          const double dense = emb ? (k == 0 ? eb.last : eb.each) : ch.params / np;
          const double share = ch.params > 0 ? dense / ch.params : 0.0;
          const int32_t ag = dp_task(r, TaskKind::gather, gather(dense, ch.fp8_params * share, ch.expert_params / np),
                                     task.chunk);
          sim.add_edge(ag, id);
        }
        if (!prog.empty()) sim.add_edge(prog.back(), id);
        prog.push_back(id);
        if (comm == Comm::sharded && op.kind == TaskKind::backward) {
          const int32_t rs = dp_task(r, TaskKind::reduce,
                                     collective(CollectiveKind::reduce_scatter, g_bytes, unit, ch.expert_params / np), task.chunk);
          sim.add_edge(id, rs);
        } else if (comm == Comm::reduce) {
          const double dense = emb ? (k == pieces - 1 ? eb.last : eb.each) : ch.params / np;
          double sec = zero == 0 ? collective(CollectiveKind::all_reduce, g_bytes, dense, ch.expert_params / np)
                                 : collective(CollectiveKind::reduce_scatter, g_bytes, dense, ch.expert_params / np);
          const int32_t rd = dp_task(r, TaskKind::reduce, sec, task.chunk);
          sim.add_edge(id, rd);
        }
        if (first < 0) first = id;
        last = id;
      }
      const size_t at = idx(j, op.microbatch);
      if (op.kind == TaskKind::forward) {
        Fs[at] = first;
        Fe[at] = last;
      } else if (op.kind == TaskKind::backward) {
        Bs[at] = first;
        Be[at] = last;
      } else {
        Ws[at] = first;
        We[at] = last;
      }
      prev_op = &op;
    }
  }
  // Data dependencies between virtual stages, through sends where they are asynchronous.
  auto connect = [&](int32_t from, int32_t to, int64_t from_rank, int32_t link) {
    if (blocking_p2p || pp == 1) {
      sim.add_edge(from, to);
      return;
    }
    des::Task s;
    s.kind = TaskKind::send;
    s.stream = send[static_cast<size_t>(from_rank)];
    s.chunk = sim.tasks()[static_cast<size_t>(from)].chunk;
    s.microbatch = sim.tasks()[static_cast<size_t>(from)].microbatch;
    if (dopt.links) {
      s.bytes = pc.p2p_bytes;
      s.links = {link};
    } else {
      s.duration = pc.p2p_s;
    }
    const int32_t id = sim.add_task(s);
    sim.add_edge(from, id);
    sim.add_edge(id, to);
  };
  for (int64_t i = 0; i < mb; ++i) {
    for (int64_t j = 0; j < stages; ++j) {
      const int64_t r = j % pp;
      if (j + 1 < stages) connect(Fe[idx(j, i)], Fs[idx(j + 1, i)], r, fwd_link[static_cast<size_t>(r)]);
      if (j > 0) connect(Be[idx(j, i)], Bs[idx(j - 1, i)], r, bwd_link[static_cast<size_t>(r)]);
      sim.add_edge(Fe[idx(j, i)], Bs[idx(j, i)]);
      if (split_w) sim.add_edge(Be[idx(j, i)], Ws[idx(j, i)]);
    }
  }

  // Without overlap, gradients reduce (and ZeRO >= 1 parameters gather) after the last
  // computation; then the optimizer runs over this rank's shard.
  for (int64_t r = 0; r < pp; ++r) {
    const auto& prog = program[static_cast<size_t>(r)];
    double params = 0, experts = 0, fp8_dense = 0, cast = 0;
    for (const ChunkCost& ch : pc.chunks[static_cast<size_t>(r)]) {
      params += ch.params;
      experts += ch.expert_params;
      fp8_dense += ch.fp8_params;
      cast += ch.weight_cast_s;
    }
    if (dp_active && !fsdp && !opt.overlap_dp) {
      double sec = zero == 0 ? collective(CollectiveKind::all_reduce, g_bytes, params, experts)
                             : collective(CollectiveKind::reduce_scatter, g_bytes, params, experts) +
                                   gather(params, fp8_dense, experts);
      const int32_t rd = dp_task(r, TaskKind::reduce, sec, -1);
      sim.add_edge(prog.back(), rd);
    }
    des::Task o;
    o.kind = TaskKind::optimizer;
    o.stream = compute[static_cast<size_t>(r)];
    const double local = (zero >= 1 ? params / static_cast<double>(groups.dp.size) : params) +
                         (zero >= 1 ? experts / static_cast<double>(groups.dp_expert.size) : experts);
    o.duration = (t.memory.offload_optimizer ? 0.0 : optimizer_step_seconds(cost, sys, local, t.optimizer, t.bf16_moments)) + cast;
    const int32_t oid = sim.add_task(o);
    sim.add_edge(prog.back(), oid);
    if (prev_dp[static_cast<size_t>(r)] >= 0) sim.add_edge(prev_dp[static_cast<size_t>(r)], oid);
  }

  summarise(out, dopt);
  return out;
}

namespace {

/// The longest time any rank's data-parallel collectives ran beside its computation.
double dp_overlap_s(const DesStep& run) {
  const des::Simulation& sim = run.sim;
  const auto ranks = static_cast<size_t>(sim.num_ranks());
  std::vector<std::vector<des::TaskTime>> comp(ranks), dp(ranks);
  for (size_t k = 0; k < sim.tasks().size(); ++k) {
    const des::Stream& st = sim.streams()[static_cast<size_t>(sim.tasks()[k].stream)];
    const des::TaskTime& tt = run.result.times[k];
    if (tt.end <= tt.start) continue;
    if (st.kind == StreamKind::compute) comp[static_cast<size_t>(st.rank)].push_back(tt);
    else if (st.kind == StreamKind::dp_comm) dp[static_cast<size_t>(st.rank)].push_back(tt);
  }
  auto by_start = [](const des::TaskTime& a, const des::TaskTime& b) { return a.start < b.start; };
  double most = 0;
  for (size_t r = 0; r < ranks; ++r) {
    // Each stream runs one task at a time: intersect the two sorted interval lists.
    auto& c = comp[r];
    auto& d = dp[r];
    std::sort(c.begin(), c.end(), by_start);
    std::sort(d.begin(), d.end(), by_start);
    double both = 0;
    for (size_t i = 0, j = 0; i < c.size() && j < d.size();) {
      both += std::max(0.0, std::min(c[i].end, d[j].end) - std::max(c[i].start, d[j].start));
      if (c[i].end < d[j].end) ++i;
      else ++j;
    }
    most = std::max(most, both);
  }
  return most;
}

}  // namespace

DesStep des_step(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                 const StepOptions& opt, const DesOptions& dopt) {
  const PipelineCosts pc = pipeline_costs(m, sys, t, cost, opt);
  DesStep out = simulate_pipeline(pc, sys, t, cost, opt, dopt);
  const StepBreakdown an = analytical_step(m, sys, t, cost, opt);
  // The data-parallel collectives the run overlapped with computation hold SMs of their
  // own meanwhile (analytical_step's dp_slowed_s): the computation beside them runs on the
  // rest, which lengthens the step by the busiest rank's overlapped span times their share.
  const double slowed = dp_overlap_s(out) * an.dp_sm_share;
  const double step = out.step.step_s + slowed;
  out.step = an;
  out.step.compute_s += slowed - an.dp_slowed_s;
  out.step.dp_slowed_s = slowed;
  // Same report keys: the step time comes from the run; the bubble is what the slowest
  // stage idles beyond the exposed communication the analytical engine itemises.
  const double analytical_step_s = out.step.step_s;
  out.step.step_s = step;
  out.step.bubble_s = std::max(0.0, out.step.bubble_s + (step - analytical_step_s));
  const double tokens_step = static_cast<double>(t.global_batch) * static_cast<double>(t.seq_len);
  out.step.tokens_per_s = tokens_step / step;
  out.step.tokens_per_s_per_gpu = out.step.tokens_per_s / static_cast<double>(sys.num_gpus);
  const double scale = analytical_step_s / step;
  out.step.model_tflops_per_gpu *= scale;
  out.step.mfu *= scale;
  out.step.hfu *= scale;
  return out;
}

}  // namespace capsim
