#include "capsim/core/train.hpp"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <limits>
#include <tuple>

#include "capsim/core/layout.hpp"

namespace capsim {

namespace {

/// Relative work of a plan: forward+backward FLOPs factor with recompute (3 + extra
/// forward), times the pipeline bubble 1 + (pp-1)/(vpp*m) (Narayanan et al. 2021, Eq. 2).
double work_proxy(const TrainingPlan& t) {
  const Recompute r = t.recompute.value_or(Recompute::none);
  // Selective: Megatron-LM reruns the attention core (a few percent); op-level
  // checkpointing reruns every second matrix multiply (half a forward).
  const double selective = framework_of(t) == Framework::pytorch ? 3.5 : 3.05;
  const double flops = r == Recompute::full ? 3.0 + t.recompute_fraction : (r == Recompute::selective ? selective : 3.0);
  const double m = static_cast<double>(num_microbatches(t));
  const double bubble = 1.0 + static_cast<double>(t.pp - 1) / (static_cast<double>(t.vpp.value_or(1)) * m);
  return flops * bubble;
}

/// The values each auto field of `layout` (tp, pp, dp, cp, ep, sp fixed) may take.
struct AutoCandidates {
  std::vector<Schedule> schedules;
  std::vector<int64_t> micro_batches;
  std::vector<std::pair<Recompute, double>> recomputes;  ///< with the fraction of layers
  std::vector<int64_t> vpps;
  std::vector<int> zeros;
  std::vector<int64_t> etps;
};

AutoCandidates auto_candidates(const TrainingPlan& layout, const ModelSpec& m) {
  AutoCandidates c;
  // Schedules to try: the plan's, or with "auto" 1F1B (interleaved too, when vpp is auto)
  // and the zero-bubble ones.
  c.schedules = {layout.schedule};
  if (layout.schedule_auto) {
    c.schedules = {Schedule::one_f_one_b};
    if (layout.pp > 1) c.schedules.insert(c.schedules.end(), {Schedule::zb_h1, Schedule::dualpipe});
  }
  const int64_t local_batch = layout.global_batch / layout.dp;
  if (layout.micro_batch) c.micro_batches = {*layout.micro_batch};
  else if (layout.pp > 1 && framework_of(layout) == Framework::pytorch && layout.schedule != Schedule::dualpipe &&
           local_batch % layout.pp == 0) {
    // torchtitan splits the local batch into as many microbatches as pipeline stages unless
    // told otherwise (--experimental.pipeline_parallel_microbatches: "the default value
    // will be the number of pipeline stages").
    c.micro_batches = {local_batch / layout.pp};
  } else {
    c.micro_batches = divisors(local_batch);
    std::reverse(c.micro_batches.begin(), c.micro_batches.end());
  }
  if (layout.recompute) c.recomputes = {{*layout.recompute, layout.recompute_fraction}};
  else
    // Full recompute of a quarter, half, three quarters or all of each stage's layers.
    c.recomputes = {{Recompute::none, 1.0}, {Recompute::selective, 1.0}, {Recompute::full, 0.25},
                    {Recompute::full, 0.5}, {Recompute::full, 0.75}, {Recompute::full, 1.0}};
  if (layout.vpp) c.vpps = {*layout.vpp};
  else if (!layout.stage_layers.empty()) {
    c.vpps = {std::max<int64_t>(1, static_cast<int64_t>(layout.stage_layers.size()) / layout.pp)};
  } else {
    const bool interleave = layout.pp > 1 && (c.schedules.size() > 1 || layout.schedule == Schedule::one_f_one_b);
    if (framework_of(layout) == Framework::pytorch) {
      // PyTorch pipelining as torchtitan drives it: without split points a multi-stage
      // schedule gets 2 stages per rank, the layers split as evenly as they go (torchtitan
      // 9dec370, parallelisms/pipelining_utils.py generate_split_points:
      // num_stages_per_rank = 2); more takes split points the user writes.
      c.vpps = {1};
      if (interleave && 2 * layout.pp <= m.layers) c.vpps.push_back(2);
    } else {
      for (int64_t v : divisors(std::max<int64_t>(1, m.layers / layout.pp)))
        if (layout.pp * v <= m.layers && (v == 1 || interleave)) c.vpps.push_back(v);
    }
  }
  if (layout.zero) c.zeros = {*layout.zero};
  else c.zeros = {0, 1, 2, 3};
  if (layout.etp) c.etps = {*layout.etp};
  else
    for (int64_t e : divisors(layout.tp))
      if ((layout.tp * layout.cp * layout.dp) % (layout.ep * e) == 0) c.etps.push_back(e);
  return c;
}

/// Single changes that lower the memory of `t` (see TrainEvaluation::remedies). Each
/// changed layout must keep the GPU count (or double it, for data parallel), divide the
/// model and the batch, and pass the layout rules; `now` is the peak of `t` as evaluated.
std::vector<FitRemedy> fit_remedies(const Scenario& s, const TrainingPlan& t, double now) {
  const ModelSpec& m = s.model;
  std::vector<FitRemedy> out;
  auto str = [](int64_t v) { return std::to_string(v); };
  auto try_plan = [&](const std::string& change, TrainingPlan c, const SystemSpec& sys) {
    if (c.global_batch % (c.micro_batch.value_or(1) * c.dp) != 0) return;
    if (c.pp > m.layers || c.tp > sys.gpus_per_node || m.heads % c.tp != 0) return;
    if (c.vpp.value_or(1) > 1 && (num_microbatches(c) % c.pp != 0 || c.pp * c.vpp.value_or(1) > m.layers)) return;
    if (c.schedule == Schedule::dualpipe &&
        (c.pp % 2 != 0 || num_microbatches(c) % 2 != 0 || num_microbatches(c) < 2 * c.pp))
      return;
    Scenario probe = s;
    probe.system = sys;
    probe.training = c;
    if (!check_training_layout(probe).empty()) return;
    const TrainingMemory mem = training_memory(m, sys, c);
    if (mem.peak().total_bytes < now) out.push_back({change, mem.peak().total_bytes, mem.fits()});
  };
  const int zero = t.zero.value_or(0);
  if (t.dp * t.cp > 1)
    for (int z = zero + 1; z <= 3; ++z) {
      TrainingPlan c = t;
      c.zero = z;
      try_plan("zero " + str(z), c, s.system);
    }
  const Recompute rc = t.recompute.value_or(Recompute::none);
  if (rc == Recompute::none) {
    TrainingPlan c = t;
    c.recompute = Recompute::selective;
    try_plan("recompute selective", c, s.system);
  }
  if (rc != Recompute::full || t.recompute_fraction < 1.0) {
    TrainingPlan c = t;
    c.recompute = Recompute::full;
    c.recompute_fraction = 1.0;
    try_plan("recompute full", c, s.system);
  }
  if (t.micro_batch.value_or(1) > 1) {
    TrainingPlan c = t;
    c.micro_batch = 1;
    try_plan("micro_batch 1", c, s.system);
  }
  if (t.dp % 2 == 0) {
    TrainingPlan c = t;
    c.pp *= 2;
    c.dp /= 2;
    try_plan("pp " + str(c.pp) + " (dp " + str(c.dp) + ")", c, s.system);
    c = t;
    c.tp *= 2;
    c.dp /= 2;
    try_plan("tp " + str(c.tp) + " (dp " + str(c.dp) + ")", c, s.system);
  }
  if (zero >= 1 && s.system.num_gpus <= (int64_t{1} << 40)) {
    TrainingPlan c = t;
    c.dp *= 2;
    if (c.global_batch % (c.micro_batch.value_or(1) * c.dp) != 0) c.global_batch *= 2;
    SystemSpec sys = s.system;
    sys.num_gpus *= 2;
    try_plan("dp " + str(c.dp) + " on " + str(sys.num_gpus) + " GPUs", c, sys);
  }
  std::stable_sort(out.begin(), out.end(), [](const FitRemedy& a, const FitRemedy& b) {
    return a.fits != b.fits ? a.fits : a.peak_bytes < b.peak_bytes;
  });
  return out;
}

/// The stack of `s`'s plan fixed before any auto field is searched (so that every ZeRO
/// candidate is priced with the same conventions: from the stated ZeRO stage; Megatron-LM
/// when that is auto too), with the fields left auto listed in `ev.auto_fields`, the
/// parameter count and the warnings the plan draws.
TrainingPlan settle_stack(const Scenario& s, TrainEvaluation& ev) {
  const ModelSpec& m = s.model;
  TrainingPlan base = *s.training;
  if (!base.framework) {
    ev.auto_fields.push_back("framework");
    base.framework = framework_of(base);
  }
  if (!base.attention) {
    ev.auto_fields.push_back("attention");
    base.attention = default_attention(base, s.system.gpu.arch);
  }
  if (!base.tp_comm_overlap) ev.auto_fields.push_back("tp_comm_overlap");
  if (m.moe && !base.moe_dispatcher) ev.auto_fields.push_back("moe_dispatcher");
  if (m.moe && !base.ep_overlap) ev.auto_fields.push_back("ep_overlap");
  if (base.precision == DType::fp8 && !base.fp8_blockwise) {
    ev.auto_fields.push_back("fp8_recipe");
    base.fp8_blockwise = false;  // the frameworks' default: tensorwise scaling
  }
  if (trains_adapters(base.mode)) {
    if (!base.lora || !base.lora->rank) ev.auto_fields.push_back("lora.rank");
    if (!base.lora || !base.lora->targets) ev.auto_fields.push_back("lora.targets");
    if (!base.lora || !base.lora->dropout) ev.auto_fields.push_back("lora.dropout");
    base.lora = resolved_lora(base);
  }
  ev.params = count_params(m);
  if (base.seq_len > m.max_position && m.max_position > 0)
    ev.warnings.push_back("seq_len " + std::to_string(base.seq_len) + " exceeds the model's max_position_embeddings " +
                          std::to_string(m.max_position) + " (long-context training extends RoPE)");

  // Auto fields, reported under `resolved`.
  for (unsigned bit = 0; bit < std::size(kAutoLayoutNames); ++bit)
    if (base.auto_layout & (1u << bit)) ev.auto_fields.push_back(kAutoLayoutNames[bit]);
  if (base.optimizer_auto) ev.auto_fields.push_back("optimizer");
  if (!base.micro_batch) ev.auto_fields.push_back("micro_batch");
  if (!base.recompute) {
    ev.auto_fields.push_back("recompute");
    ev.auto_fields.push_back("recompute_fraction");
  }
  if (base.schedule_auto) ev.auto_fields.push_back("schedule");
  if (!base.vpp) ev.auto_fields.push_back("vpp");
  if (!base.zero) ev.auto_fields.push_back("zero");
  if (!base.etp) ev.auto_fields.push_back("etp");
  return base;
}

}  // namespace

TrainEvaluation evaluate_training(const Scenario& s, const CostModel* cost, const StepOptions& given) {
  if (s.training->precision_auto) {
    // The faster candidate precision that fits; without a cost model the first (bf16)
    // unless only a later one fits.
    Scenario one = s;
    one.training->precision_auto = false;
    std::optional<TrainEvaluation> best;
    for (DType d : precision_candidates(*s.training, s.system.gpu)) {
      one.training->precision = d;
      TrainEvaluation ev = evaluate_training(one, cost, given);
      const bool faster = best && best->feasible && ev.feasible && cost && ev.step && best->step &&
                          ev.step->step_s < best->step->step_s;
      if (!best || (ev.feasible && !best->feasible) || faster) best = std::move(ev);
    }
    best->auto_fields.insert(best->auto_fields.begin(), "precision");
    return std::move(*best);
  }
  StepOptions options = given;
  if (s.training->tp_comm_overlap) options.tp_overlap = s.training->tp_comm_overlap;
  options.moe_imbalance = std::max(options.moe_imbalance, s.training->moe_imbalance);
  options.overlap_dp = options.overlap_dp && s.training->overlap_dp;
  TrainEvaluation ev;
  const ModelSpec& m = s.model;
  TrainingPlan base = settle_stack(s, ev);
  // Megatron-Core's batch-level expert-parallel overlap is a schedule of its own (combined
  // 1F1B): with "auto" schedules it is a candidate where it can run; otherwise off, as in
  // Megatron-Core's TransformerConfig.
  std::vector<bool> ep_overlaps = {base.ep_overlap.value_or(false)};
  if (base.schedule_auto && m.moe && !base.ep_overlap) ep_overlaps = {false, true};
  struct Best {
    double key1 = std::numeric_limits<double>::infinity();
    double key2 = 0, key3 = 0;
    TrainingPlan plan;
    TrainingMemory mem;
    bool set = false;
  } best, smallest;
  double smallest_bytes = std::numeric_limits<double>::infinity();

  // Every candidate of the auto fields on one layout (tp, pp, dp, cp, ep, sp fixed).
  auto try_layout = [&](const TrainingPlan& layout) {
    const AutoCandidates c = auto_candidates(layout, m);
    const auto& [schedules, mbs, rcs, vpps, zeros, etps] = c;
    for (Schedule sch : schedules)
    for (bool overlap : ep_overlaps)
    for (int64_t mb : mbs)
      for (const auto& [rc, rc_fraction] : rcs)
        for (int64_t v : vpps)
          for (int z : zeros)
            for (int64_t e : etps) {
              TrainingPlan t = layout;
              t.schedule = sch;
              t.schedule_auto = false;
              t.ep_overlap = overlap;
              t.micro_batch = mb;
              t.recompute = rc;
              t.recompute_fraction = rc_fraction;
              t.vpp = v;
              t.zero = z;
              t.etp = e;
              // Checked on the whole candidate: recompute and vpp decide whether it can run.
              if (overlap && !ep_overlap_on(t)) continue;
              if (t.global_batch % (mb * t.dp) != 0) continue;
              if (v > 1 && num_microbatches(t) % t.pp != 0) continue;
              if (v > 1 && sch != Schedule::one_f_one_b) continue;
              if (sch == Schedule::dualpipe &&
                  (t.pp % 2 != 0 || num_microbatches(t) % 2 != 0 || num_microbatches(t) < 2 * t.pp))
                continue;
              TrainingMemory mem = training_memory(m, s.system, t);
              const double bytes = mem.peak().total_bytes;
              if (bytes < smallest_bytes) {
                smallest_bytes = bytes;
                smallest.plan = t;
                smallest.mem = mem;
                smallest.set = true;
              }
              if (!mem.fits()) continue;
              const double k1 = cost ? analytical_step(m, s.system, t, *cost, options).step_s : work_proxy(t);
              const double k2 = -static_cast<double>(mb), k3 = static_cast<double>(z);
              if (!best.set || std::tie(k1, k2, k3) < std::tie(best.key1, best.key2, best.key3)) {
                best.key1 = k1;
                best.key2 = k2;
                best.key3 = k3;
                best.plan = t;
                best.mem = std::move(mem);
                best.set = true;
              }
            }
  };
  // Optimizer state precision left to the Megatron stack: full precision unless it costs
  // recomputation or does not fit, where the frameworks' 16-bit states are what a recipe
  // runs: NVIDIA's DGX Cloud Nemotron-4 340B recipe, the one of its release whose states
  // would not fit beside its activations, runs distributed_fused_adam with dtype bf16 and
  // grad_sync_dtype bf16 (dgxc-benchmarking v24.11.1, nemotron/nemotron4-340b-synth.yaml;
  // its other recipes keep the defaults); Megatron-Core's precision-aware optimizer keeps
  // BF16 moments the same way, as DeepSeek-V3 trained (report Sec. 3.3.2). Modelled as BF16
  // moments beside fp32 master weights, and a 16-bit gradient reduction where that is auto
  // too; decided per layout, taken where it is faster than the layout's best at full
  // precision. Pre-training only, what those recipes are: fine-tuning, preference and RL
  // updates (which run as SFT steps) keep full precision, as NeMo RL's Megatron policy does
  // (megatron_cfg.optimizer: use_precision_aware_optimizer with Megatron-Core's fp32
  // exp_avg defaults, examples/configs/grpo_math_1B.yaml).
  const bool states_auto = *base.framework == Framework::megatron && base.moments_auto && !base.bf16_moments &&
                           !base.grad_reduce_fp32 && base.precision != DType::fp16 && base.optimizer == Optimizer::adamw &&
                           base.mode == TrainMode::pretrain;
  auto try_layout_states = [&](const TrainingPlan& layout) {
    if (!states_auto) {
      try_layout(layout);
      return;
    }
    const Best outer = best;
    best = Best{};
    try_layout(layout);
    Best local = best;
    // How much of the forward a plan reruns: none, the selective modules, or a share of
    // the layers in full.
    auto rerun = [](const TrainingPlan& t) {
      const Recompute r = t.recompute.value_or(Recompute::none);
      return r == Recompute::none ? 0.0 : r == Recompute::selective ? 0.01 : t.recompute_fraction;
    };
    if (!local.set || rerun(local.plan) > 0.0) {
      TrainingPlan half = layout;
      half.bf16_moments = true;
      half.grad_reduce_fp32 = false;
      best = Best{};
      try_layout(half);
      // Only where the 16-bit states spare recomputation (a stated recompute policy keeps
      // full precision) and the layout is then faster.
      if (best.set && (!local.set || (best.key1 < local.key1 && rerun(best.plan) < rerun(local.plan)))) local = best;
    }
    best = outer;
    if (local.set && (!best.set || std::tie(local.key1, local.key2, local.key3) < std::tie(best.key1, best.key2, best.key3)))
      best = std::move(local);
  };
  if (base.auto_layout == 0) {
    try_layout_states(base);
  } else {
    Scenario with_base = s;
    with_base.training = base;
    for (const TrainingPlan& layout : layout_candidates(with_base)) try_layout_states(layout);
  }
  if (states_auto && best.set && best.plan.bf16_moments) {
    ev.auto_fields.push_back("optimizer_moments");
    ev.auto_fields.push_back("grad_reduce_dtype");
  }
  if (best.set) {
    ev.plan = best.plan;
    ev.memory = std::move(best.mem);
  } else if (smallest.set) {
    ev.plan = smallest.plan;
    ev.memory = std::move(smallest.mem);
    ev.feasible = false;
    ev.fail_reason = "does not fit: the stage that needs most takes " +
                     std::to_string(ev.memory.peak().total_bytes / kGiB) + " GiB of " +
                     std::to_string(ev.memory.peak().capacity_bytes / kGiB) + " GiB";
    ev.remedies = fit_remedies(s, ev.plan, ev.memory.peak().total_bytes);
  } else {
    // Nothing to price: the plan as given, auto fields at their defaults, so that the
    // report still has a layout and its memory.
    ev.plan = base;
    ev.plan.auto_layout = 0;
    ev.plan.micro_batch = ev.plan.micro_batch.value_or(1);
    ev.plan.recompute = ev.plan.recompute.value_or(Recompute::none);
    ev.plan.vpp = ev.plan.vpp.value_or(1);
    ev.plan.zero = ev.plan.zero.value_or(0);
    ev.plan.etp = ev.plan.etp.value_or(1);
    ev.plan.schedule_auto = false;
    ev.memory = training_memory(m, s.system, ev.plan);
    ev.feasible = false;
    ev.fail_reason = "no candidate layout satisfies the divisibility rules";
  }
  if (cost) {
    ev.step = analytical_step(m, s.system, ev.plan, *cost, options);
    ev.provenance = cost->provenance();
  }
  return ev;
}

double effective_training_fraction(int64_t gpus) {
  constexpr double kLlama3Gpus = 16384.0, kLlama3Effective = 0.90;
  constexpr double k = (1.0 / kLlama3Effective - 1.0) / kLlama3Gpus;
  return 1.0 / (1.0 + k * static_cast<double>(std::max<int64_t>(0, gpus)));
}

}  // namespace capsim
