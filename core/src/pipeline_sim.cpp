#include "capsim/core/pipeline_sim.hpp"

#include <algorithm>
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
  }
  return "?";
}

PipelineSchedule schedule_of(const TrainingPlan& t) {
  if (t.vpp.value_or(1) > 1) return PipelineSchedule::interleaved;
  switch (t.schedule) {
    case Schedule::gpipe: return PipelineSchedule::gpipe;
    case Schedule::zb_h1: return PipelineSchedule::zb_h1;
    case Schedule::one_f_one_b: return PipelineSchedule::one_f_one_b;
  }
  return PipelineSchedule::one_f_one_b;
}

std::vector<PipeOp> schedule_order(PipelineSchedule s, int64_t pp, int64_t vpp, int64_t rank, int64_t m) {
  std::vector<PipeOp> ops;
  const TaskKind F = TaskKind::forward, B = TaskKind::backward, W = TaskKind::weight_grad;
  switch (s) {
    case PipelineSchedule::gpipe: {
      for (int64_t i = 0; i < m; ++i) ops.push_back({F, 0, i});
      for (int64_t i = m - 1; i >= 0; --i) ops.push_back({B, 0, i});
      break;
    }
    case PipelineSchedule::one_f_one_b: {
      const int64_t warm = std::min(pp - rank - 1, m);
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
      const int64_t warm = std::min(2 * (pp - rank - 1) + (vpp - 1) * pp, total);
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

DesStep simulate_pipeline(const PipelineCosts& pc, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                          const StepOptions& opt, const DesOptions& dopt) {
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
  const double grad_bytes = t.precision == DType::fp16 ? 2.0 : 4.0;

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
  const bool fsdp = zero >= 3 && pp == 1;
  const bool dp_active = groups.dp.size > 1 || groups.dp_expert.size > 1;

  // Which operation of each chunk is its first forward and its last backward-side pass
  // (gradients of the whole step are ready after it).
  std::vector<std::vector<PipeOp>> orders(static_cast<size_t>(pp));
  for (int64_t r = 0; r < pp; ++r) orders[static_cast<size_t>(r)] = schedule_order(out.schedule, pp, vpp, r, mb);
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
    for (const PipeOp& op : orders[static_cast<size_t>(r)]) {
      const int64_t j = op.chunk * pp + r;
      const ChunkCost& ch = pc.chunks[static_cast<size_t>(r)][static_cast<size_t>(op.chunk)];
      double seconds = 0, alloc = 0, free = 0;
      if (op.kind == TaskKind::forward) {
        seconds = ch.fwd_s + (blocking_p2p && j < stages - 1 ? pc.p2p_s : 0.0);
        alloc = ch.activation_bytes;
      } else if (op.kind == TaskKind::backward) {
        seconds = ch.bwd_s + (split_w ? 0.0 : ch.wgrad_s) + (blocking_p2p && j > 0 ? pc.p2p_s : 0.0);
        if (!split_w) free = ch.activation_bytes;
      } else {
        seconds = ch.wgrad_s;
        free = ch.activation_bytes;
      }
      // Pieces: per layer under FSDP (a gather before each, a reduce-scatter after each
      // backward one); per gradient bucket for the chunk's last backward and first forward
      // when data-parallel communication overlaps them (Megatron-LM buckets of
      // max(40M, 1M x dp) elements, at most one per layer).
      const double bucket = std::max(40e6, 1e6 * static_cast<double>(groups.dp.size));
      const int64_t buckets =
          std::max<int64_t>(1, std::min<int64_t>(ch.layers, static_cast<int64_t>(std::ceil((ch.params + ch.expert_params) / bucket))));
      int64_t pieces = 1;
      enum class Comm { none, fsdp, reduce, gather } comm = Comm::none;
      if (dp_active && fsdp && op.kind != TaskKind::weight_grad) {
        pieces = std::max<int64_t>(1, ch.layers);
        comm = Comm::fsdp;
      } else if (dp_active && !fsdp && opt.overlap_dp && is_last_backward(op, r)) {
        pieces = buckets;
        comm = Comm::reduce;
      } else if (dp_active && !fsdp && opt.overlap_dp && zero >= 1 && is_first_forward(op, r)) {
        pieces = buckets;
        comm = Comm::gather;
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
        if (comm == Comm::fsdp) {
          // Gather this layer's weights, one layer ahead of the compute that needs them.
          const int32_t ag = dp_task(r, TaskKind::gather, collective(CollectiveKind::all_gather, 2.0, ch.params / np, ch.expert_params / np),
                                     task.chunk);
          if (prog.size() >= 2) sim.add_edge(prog[prog.size() - 2], ag);
          sim.add_edge(ag, id);
        } else if (comm == Comm::gather) {
          const int32_t ag = dp_task(r, TaskKind::gather, collective(CollectiveKind::all_gather, 2.0, ch.params / np, ch.expert_params / np),
                                     task.chunk);
          sim.add_edge(ag, id);
        }
        if (!prog.empty()) sim.add_edge(prog.back(), id);
        prog.push_back(id);
        if (comm == Comm::fsdp && op.kind == TaskKind::backward) {
          const int32_t rs = dp_task(r, TaskKind::reduce,
                                     collective(CollectiveKind::reduce_scatter, grad_bytes, ch.params / np, ch.expert_params / np), task.chunk);
          sim.add_edge(id, rs);
        } else if (comm == Comm::reduce) {
          double sec = zero == 0 ? collective(CollectiveKind::all_reduce, grad_bytes, ch.params / np, ch.expert_params / np)
                                 : collective(CollectiveKind::reduce_scatter, grad_bytes, ch.params / np, ch.expert_params / np);
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
    double params = 0, experts = 0;
    for (const ChunkCost& ch : pc.chunks[static_cast<size_t>(r)]) {
      params += ch.params;
      experts += ch.expert_params;
    }
    if (dp_active && !fsdp && !opt.overlap_dp) {
      double sec = zero == 0 ? collective(CollectiveKind::all_reduce, grad_bytes, params, experts)
                             : collective(CollectiveKind::reduce_scatter, grad_bytes, params, experts) +
                                   collective(CollectiveKind::all_gather, 2.0, params, experts);
      const int32_t rd = dp_task(r, TaskKind::reduce, sec, -1);
      sim.add_edge(prog.back(), rd);
    }
    des::Task o;
    o.kind = TaskKind::optimizer;
    o.stream = compute[static_cast<size_t>(r)];
    const double local = (zero >= 1 ? params / static_cast<double>(groups.dp.size) : params) +
                         (zero >= 1 ? experts / static_cast<double>(groups.dp_expert.size) : experts);
    o.duration = t.memory.offload_optimizer ? 0.0 : cost.memory_bound(Bytes(local * optimizer_traffic(t.optimizer))).value;
    const int32_t oid = sim.add_task(o);
    sim.add_edge(prog.back(), oid);
    if (prev_dp[static_cast<size_t>(r)] >= 0) sim.add_edge(prev_dp[static_cast<size_t>(r)], oid);
  }

  out.result = sim.run();
  out.critical_path_bound_s = sim.critical_path();
  for (int32_t id : sim.critical_tasks()) {
    const des::Task& task = sim.tasks()[static_cast<size_t>(id)];
    const des::TaskTime& tt = out.result.times[static_cast<size_t>(id)];
    out.critical_path_s[std::string(des::to_string(task.kind))] += tt.end - tt.start;
  }
  const double step = out.result.makespan;
  out.busy_s.assign(static_cast<size_t>(pp), 0.0);
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
  return out;
}

DesStep des_step(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                 const StepOptions& opt, const DesOptions& dopt) {
  const PipelineCosts pc = pipeline_costs(m, sys, t, cost, opt);
  DesStep out = simulate_pipeline(pc, sys, t, cost, opt, dopt);
  const double step = out.step.step_s;
  out.step = analytical_step(m, sys, t, cost, opt);
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
