#include "capsim/io/report.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "capsim/core/layout.hpp"
#include "capsim/core/workload.hpp"
#include "capsim/io/json_read.hpp"

namespace capsim::io {

using nlohmann::json;

namespace {

std::string family_type(Family f) { return std::string(to_string(f)); }

json layer_json(const ModelSpec& m, int64_t i) {
  const LayerParams lp = layer_params(m, i);
  json j;
  j["index"] = i;
  j["kind"] = m.is_moe_layer(i) ? "moe" : "dense";
  j["attention"] = m.mla ? "mla" : (m.kv_heads == m.heads ? "mha" : "gqa");
  j["params"] = lp.total();
  j["params_attention"] = lp.attention;
  j["params_mlp"] = lp.dense_mlp + lp.shared_experts + lp.routed_experts + lp.router;
  j["params_norms"] = lp.norms;
  if (m.is_sliding_layer(i)) j["sliding_window"] = m.sliding_window;
  return j;
}

}  // namespace

json model_report(const ModelSpec& m, int64_t seq_len) {
  const ParamCounts c = count_params(m);
  json j;
  j["schema"] = "capsim-model-report/1";
  j["name"] = m.name;
  j["model_type"] = family_type(m.family);
  j["params_total"] = c.total;
  j["params_active"] = c.active;
  j["params_embedding"] = c.embedding;
  j["params_non_embedding"] = c.total - c.embedding;
  json kv;
  for (DType d : {DType::fp32, DType::bf16, DType::fp16, DType::fp8, DType::int8, DType::int4})
    kv[std::string(to_string(d))] = kv_cache_bytes_per_token(m, d);
  j["kv_cache_bytes_per_token"] = kv;
  j["seq_len"] = seq_len;
  j["forward_flops_per_token"] = forward_flops_per_token(m, seq_len);
  json shape;
  shape["hidden_size"] = m.hidden;
  shape["num_layers"] = m.layers;
  shape["num_attention_heads"] = m.heads;
  shape["num_key_value_heads"] = m.kv_heads;
  shape["head_dim"] = m.head_dim;
  shape["intermediate_size"] = m.intermediate;
  shape["vocab_size"] = m.vocab;
  shape["max_position_embeddings"] = m.max_position;
  shape["tied_embeddings"] = m.tied_embeddings;
  shape["gated_mlp"] = m.gated_mlp;
  shape["norm"] = m.norm == NormKind::layernorm ? "layernorm" : "rmsnorm";
  if (m.moe) {
    shape["moe"] = {{"num_experts", m.moe->num_experts},
                    {"top_k", m.moe->top_k},
                    {"expert_intermediate_size", m.moe->expert_intermediate},
                    {"shared_experts", m.moe->shared_experts}};
  }
  if (m.mla) {
    shape["mla"] = {{"q_lora_rank", m.mla->q_lora_rank},
                    {"kv_lora_rank", m.mla->kv_lora_rank},
                    {"qk_nope_head_dim", m.mla->qk_nope_head_dim},
                    {"qk_rope_head_dim", m.mla->qk_rope_head_dim},
                    {"v_head_dim", m.mla->v_head_dim}};
  }
  if (m.sliding_window > 0) {
    shape["sliding_window"] = m.sliding_window;
    shape["sliding_layers"] = m.sliding_layers();
  }
  j["shape"] = shape;
  json layers = json::array();
  for (int64_t i = 0; i < m.layers; ++i) layers.push_back(layer_json(m, i));
  j["layers"] = layers;
  return j;
}

json stage_memory_json(const StageMemory& s) {
  json j;
  j["stage"] = s.stage;
  j["layers"] = s.layers;
  j["inflight_microbatches"] = s.inflight_microbatches;
  j["params"] = s.params;
  j["weights_bytes"] = s.weights_bytes;
  j["gradients_bytes"] = s.gradients_bytes;
  j["optimizer_bytes"] = s.optimizer_bytes;
  j["activations_bytes"] = s.activations_bytes;
  // Frozen models (a DPO reference, a colocated teacher): a line of their own, only where held.
  if (s.reference_weights_bytes > 0) j["reference_weights_bytes"] = s.reference_weights_bytes;
  if (s.frozen_weights_bytes > 0) j["teacher_weights_bytes"] = s.frozen_weights_bytes;
  j["other_bytes"] = s.other_bytes;
  j["total_bytes"] = s.total_bytes;
  j["capacity_bytes"] = s.capacity_bytes;
  j["fits"] = s.fits;
  j["other"] = {{"logits_bytes", s.logits_bytes},
                {"comm_buffer_bytes", s.comm_buffer_bytes},
                {"recompute_working_bytes", s.recompute_working_bytes},
                {"cuda_context_bytes", s.cuda_context_bytes},
                {"allocator_reserve_bytes", s.allocator_reserve_bytes}};
  return j;
}

json train_report(const Scenario& s, const TrainEvaluation& ev) {
  json j;
  j["schema"] = "capsim-train-report/1";
  j["id"] = s.id;
  j["model"] = {{"name", s.model.name},
                {"model_type", family_type(s.model.family)},
                {"params_total", ev.params.total},
                {"params_active", ev.params.active},
                {"params_embedding", ev.params.embedding}};
  j["system"] = {{"gpu", s.system.gpu.id},
                 {"num_gpus", s.system.num_gpus},
                 {"gpus_per_node", s.system.gpus_per_node},
                 {"nic_gbps_per_gpu", s.system.nic_gbps_per_gpu}};
  const TrainingPlan& t = ev.plan;
  json layout = {{"tp", t.tp},
                 {"pp", t.pp},
                 {"vpp", t.vpp.value_or(1)},
                 {"dp", t.dp},
                 {"cp", t.cp},
                 {"ep", t.ep},
                 {"etp", t.etp.value_or(1)},
                 {"sp", t.sp},
                 {"zero", t.zero.value_or(0)},
                 {"micro_batch", t.micro_batch.value_or(1)},
                 {"global_batch", t.global_batch},
                 {"num_microbatches", num_microbatches(t)},
                 {"seq_len", t.seq_len},
                 {"recompute", std::string(to_string(t.recompute.value_or(Recompute::none)))},
                 {"recompute_fraction", t.recompute.value_or(Recompute::none) == Recompute::full ? t.recompute_fraction : 0.0},
                 {"precision", std::string(to_string(t.precision))},
                 {"schedule", t.pp == 1 ? std::string("none") : t.vpp.value_or(1) > 1 ? std::string("interleaved-1f1b") : std::string(to_string(t.schedule))},
                 {"attention", std::string(to_string(attention_of(t)))},
                 {"optimizer", std::string(to_string(t.optimizer))},
                 {"optimizer_moments", t.bf16_moments ? "bf16" : "fp32"},
                 {"grad_reduce_dtype", grad_bytes(t) == 4.0 ? "fp32" : t.precision == DType::fp16 ? "fp16" : "bf16"},
                 {"fp8_param_gather", fp8_params(t)},
                 {"fp8_recipe", t.precision != DType::fp8 ? "none" : t.fp8_blockwise.value_or(false) ? "blockwise" : "tensorwise"},
                 {"mode", std::string(to_string(t.mode))},
                 {"framework", std::string(to_string(framework_of(t)))},
                 {"elementwise", t.eager_elementwise ? "eager" : "fused"},
                 {"loss", framework_of(t) != Framework::pytorch ? "fused" : t.compiled_loss.value_or(false) ? "compiled" : "eager"},
                 // A share when the scenario gives one; auto: Transformer Engine's
                 // userbuffers overlap where the Megatron stack runs it, or none.
                 {"tp_comm_overlap", t.tp_comm_overlap ? json(*t.tp_comm_overlap)
                                     : userbuffers_tp_overlap(s.system, t) ? json("userbuffers")
                                                                           : json("none")}};
  // Packed sequences: the documents' length, over which attention runs.
  if (t.document_tokens) layout["document_tokens"] = attention_span(t);
  if (s.model.moe) {
    layout["moe_dispatcher"] = std::string(to_string(dispatcher_of(t, s.model)));
    layout["ep_overlap"] = ep_overlap_on(t);
  }
  if (t.recompute.value_or(Recompute::none) == Recompute::selective && framework_of(t) == Framework::megatron) {
    // What Megatron's selective recompute reruns (RecomputeModule bits, in their order).
    json modules = json::array();
    int bit = 0;
    for (const char* name : {"core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp"})
      if (t.recompute_modules & (1u << bit++)) modules.push_back(name);
    layout["recompute_modules"] = modules;
  }
  if (trains_adapters(t.mode)) {
    const LoraSpec l = resolved_lora(t);
    layout["lora"] = {{"rank", l.rank.value_or(0)},
                      {"targets", l.targets.value_or(std::vector<std::string>{})},
                      {"dropout", l.dropout.value_or(0.0)}};
  }
  j["layout"] = layout;
  json resolved = json::object();
  for (const auto& f : ev.auto_fields) {
    if (f == "recompute_fraction" && t.recompute.value_or(Recompute::none) != Recompute::full) continue;
    if (f.rfind("lora.", 0) == 0) {
      resolved["lora"][f.substr(5)] = layout["lora"][f.substr(5)];
      continue;
    }
    resolved[f] = layout[f];
  }
  if (s.system.nic_auto) resolved["nic_gbps_per_gpu"] = s.system.nic_gbps_per_gpu;
  j["resolved"] = resolved;
  json stages = json::array();
  for (const auto& st : ev.memory.stages) stages.push_back(stage_memory_json(st));
  json per_gpu = stage_memory_json(ev.memory.peak());
  j["memory"] = {{"per_gpu", per_gpu}, {"stages", stages}};
  if (ev.step) {
    const StepBreakdown& st = *ev.step;
    j["time"] = {{"step_s", st.step_s},
                 {"microbatch_s", st.microbatch_s},
                 {"slowest_stage", st.slowest_stage},
                 {"breakdown",
                  {{"compute_s", st.compute_s},
                   {"overlap_slowdown_s", {{"cp", st.cp_slowed_s}, {"ep", st.ep_slowed_s}, {"dp", st.dp_slowed_s}}},
                   {"recompute_s", st.recompute_s},
                   {"bubble_s", st.bubble_s},
                   {"optimizer_s", st.optimizer_s},
                   {"exposed_comm_s",
                    {{"tp", st.exposed_tp_s}, {"cp", st.exposed_cp_s}, {"ep", st.exposed_ep_s}, {"pp", st.exposed_pp_s},
                     {"dp", st.exposed_dp_s}}},
                   {"total_comm_s",
                    {{"tp", st.total_tp_s}, {"cp", st.total_cp_s}, {"ep", st.total_ep_s}, {"pp", st.total_pp_s},
                     {"dp", st.total_dp_s}}}}}};
    if (t.memory.offload_optimizer)
      j["time"]["breakdown"]["optimizer_offload"] = {{"gradients_d2h_s", st.offload_d2h_s},
                                                     {"cpu_adam_s", st.offload_cpu_s},
                                                     {"params_h2d_s", st.offload_h2d_s},
                                                     {"pcie_gbps_per_gpu", pcie_bytes_per_s(s.system) / 1e9},
                                                     {"pcie_source", s.system.pcie_gbps_per_gpu ? "scenario" : "auto: GPU preset pcie_bw_unidir_gbps"}};
    j["throughput"] = {{"tokens_per_s", st.tokens_per_s}, {"tokens_per_s_per_gpu", st.tokens_per_s_per_gpu}};
    j["model_tflops_per_gpu"] = st.model_tflops_per_gpu;
    j["mfu"] = st.mfu;
    j["hfu"] = st.hfu;
    j["flops"] = {{"model_per_step", st.model_flops_per_step}, {"hardware_per_step", st.hardware_flops_per_step}};
    const TrainingBudget& b = t.budget;
    if (b.tokens > 0) {
      // Wall clock: the steps plus the interruptions a run on these GPUs expects.
      const double effective = b.effective_fraction.value_or(effective_training_fraction(s.system.num_gpus));
      const double seconds = b.tokens / st.tokens_per_s / effective;
      const double gpu_hours = seconds / 3600.0 * static_cast<double>(s.system.num_gpus);
      json budget = {{"tokens", b.tokens},
                     {"effective_training_fraction", effective},
                     {"effective_training_source",
                      b.effective_fraction ? "scenario"
                                           : "auto: Llama 3 report Sec. 3.3.4, >90% effective training time on 16,384 "
                                             "H100s, interruptions in proportion to GPUs"},
                     {"days", seconds / 86400.0},
                     {"gpu_hours", gpu_hours},
                     {"energy_mwh", gpu_hours * s.system.gpu.tdp_w * b.pue / 1e6},
                     {"power_model", "GPU board power at TDP x PUE; hosts and network excluded"}};
      if (b.usd_per_gpu_hour > 0) budget["cost_usd"] = gpu_hours * b.usd_per_gpu_hour;
      j["budget"] = budget;
    }
  }
  if (!ev.provenance.empty()) {
    json prov = json::object();
    for (const auto& [k, v] : ev.provenance) prov[k] = v;
    j["efficiency_sources"] = prov;
  }
  j["status"] = ev.feasible ? "ok" : "does_not_fit";
  if (!ev.feasible) j["fail_reason"] = ev.fail_reason;
  if (!ev.feasible && !ev.memory.stages.empty()) {
    json remedies = json::array();
    for (const FitRemedy& f : ev.remedies)
      remedies.push_back({{"change", f.change}, {"peak_bytes", f.peak_bytes}, {"fits", f.fits}});
    j["does_not_fit"] = {{"peak_bytes", ev.memory.peak().total_bytes},
                         {"capacity_bytes", ev.memory.peak().capacity_bytes},
                         {"over_by_bytes", ev.memory.peak().total_bytes - ev.memory.peak().capacity_bytes},
                         {"remedies", remedies}};
  }
  j["warnings"] = ev.warnings;
  return j;
}

json inference_memory_json(const Scenario& s, const InferenceMemory& mem) {
  const InferencePlan& p = *s.inference;
  json j;
  j["schema"] = "capsim-inference-memory/1";
  j["id"] = s.id;
  j["model"] = {{"name", s.model.name},
                {"params_total", count_params(s.model).total},
                {"params_active", count_params(s.model).active}};
  j["layout"] = {{"tp", p.tp}, {"pp", p.pp}, {"ep", p.ep.value_or(1)}, {"replicas", p.replicas},
                 {"weight_dtype", std::string(to_string(p.weight_dtype))},
                 {"kv_dtype", std::string(to_string(p.resolved_kv_dtype()))}};
  json resolved = json::object();
  if (!p.ep) resolved["ep"] = 1;
  if (p.tp_auto) resolved["tp"] = p.tp;
  if (p.pp_auto) resolved["pp"] = p.pp;
  if (p.replicas_auto) resolved["replicas"] = p.replicas;
  if (p.weight_dtype_auto) resolved["weight_dtype"] = j["layout"]["weight_dtype"];
  if (!p.kv_dtype) resolved["kv_dtype"] = j["layout"]["kv_dtype"];
  j["resolved"] = resolved;
  j["memory"] = {{"per_gpu",
                  {{"weights_bytes", mem.weights_bytes},
                   {"activation_peak_bytes", mem.activation_peak_bytes},
                   {"non_torch_bytes", mem.non_torch_bytes},
                   {"cudagraph_bytes", mem.cudagraph_bytes},
                   {"kv_cache_bytes_per_token", mem.kv_bytes_per_token},
                   {"kv_budget_bytes", mem.kv_budget_bytes},
                   {"num_blocks", mem.num_blocks},
                   {"block_size", mem.block_size},
                   {"max_cached_tokens", mem.max_cached_tokens},
                   {"capacity_bytes", mem.capacity_bytes},
                   {"fits", mem.fits}}}};
  return j;
}

json serving_metrics(const ServingResult& r) {
  std::vector<double> ttft, tpot, e2e;
  ttft.reserve(r.requests.size());
  tpot.reserve(r.requests.size());
  e2e.reserve(r.requests.size());
  double out_tokens = 0;
  for (const auto& q : r.requests) {
    ttft.push_back(q.ttft() * 1e3);
    if (q.output > 1) tpot.push_back(q.tpot() * 1e3);
    e2e.push_back(q.e2e() * 1e3);
    out_tokens += static_cast<double>(q.output);
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  json m;
  const std::vector<double> qs = {0.5, 0.9, 0.99};
  auto put = [&](const std::string& name, double mean_ms, const std::vector<double>& p) {
    m[name + "_mean_ms"] = mean_ms;
    m[name + "_p50_ms"] = p[0];
    m[name + "_p90_ms"] = p[1];
    m[name + "_p99_ms"] = p[2];
  };
  // Each mean before its percentiles: the selection reorders the values.
  for (const auto& [name, v] :
       {std::pair<std::string, std::vector<double>*>{"ttft", &ttft}, {"tpot", &tpot}, {"e2e", &e2e}}) {
    const double mu = mean(*v);
    put(name, mu, percentiles(std::move(*v), qs));
  }
  // Inter-token gaps from the run's tally: (gap, count) pairs in ascending order.
  const GapTally& gaps = r.token_gaps;
  double gap_sum = 0;
  for (const auto& [gap, count] : gaps.runs) gap_sum += static_cast<double>(count) * (gap * 1e3);
  put("itl", gaps.total > 0 ? gap_sum / static_cast<double>(gaps.total) : 0.0, percentiles(gaps, 1e3, qs));
  m["throughput_tokens_per_s"] = r.duration_s > 0 ? out_tokens / r.duration_s : 0.0;
  m["requests_per_s"] = r.duration_s > 0 ? static_cast<double>(r.requests.size()) / r.duration_s : 0.0;
  // Goodput: the requests whose TTFT and TPOT both meet the objectives, per second.
  double good = 0, good_tokens = 0;
  for (const auto& q : r.requests)
    if (q.ttft() <= r.slo_ttft_s && q.tpot() <= r.slo_tpot_s) {
      good += 1;
      good_tokens += static_cast<double>(q.output);
    }
  m["slo_attainment"] = r.requests.empty() ? 0.0 : good / static_cast<double>(r.requests.size());
  m["goodput_requests_per_s"] = r.duration_s > 0 ? good / r.duration_s : 0.0;
  m["goodput_tokens_per_s"] = r.duration_s > 0 ? good_tokens / r.duration_s : 0.0;
  return m;
}

json serving_metrics(const std::vector<ServingResult>& runs) {
  if (runs.size() == 1) return serving_metrics(runs.front());
  std::map<std::string, std::vector<double>> values;
  json m = json::object();
  for (const auto& r : runs) {
    const json one = serving_metrics(r);
    for (const auto& [k, v] : one.items()) {
      auto& vals = values[k];  // every key gets an entry, finite values or none
      if (v.is_number() && std::isfinite(v.get<double>())) vals.push_back(v.get<double>());
    }
  }
  // The median of the runs that state the metric; none: null (a NaN would print as null).
  for (const auto& [k, v] : values) m[k] = v.empty() ? json() : json(percentile(v, 0.5));
  return m;
}

json serving_report(const Scenario& s, const std::vector<ServingResult>& runs) {
  json j = serving_report(s, runs.front());
  j["metrics"] = serving_metrics(runs);
  j["run"]["replications"] = runs.size();
  return j;
}

namespace {

/// The parts of a step (or of a run's steps, summed), in the order a layer runs them:
/// [{"part": name, key: value x scale}].
json step_parts_array(const StepParts& t, const char* key, double scale) {
  json out = json::array();
  for (const auto& [name, part] : kStepParts) out.push_back({{"part", name}, {key, t.*part * scale}});
  return out;
}

}  // namespace

json serving_report(const Scenario& s, const ServingResult& r) {
  json j;
  j["schema"] = "capsim-serving-report/1";
  j["id"] = s.id;
  j["model"] = {{"name", s.model.name}, {"params_total", count_params(s.model).total}};
  const InferencePlan& p = *s.inference;
  j["layout"] = {{"tp", p.tp}, {"pp", p.pp}, {"ep", r.ep}, {"attention_dp", r.attention_dp}, {"replicas", p.replicas},
                 {"weight_dtype", std::string(to_string(p.weight_dtype))},
                 {"activation_dtype", std::string(to_string(p.activation_dtype))}};
  if (s.model.moe && r.ep > 1) {
    // The router's skew the busiest expert-parallel rank carries (docs/engines.md).
    j["layout"]["ep_rank_skew"] = ep_router_skew(*s.model.moe, r.ep);
    j["layout"]["ep_rank_skew_source"] = s.model.moe->rank_imbalance.empty()
                                             ? "none published: routing as uniform as chance"
                                             : "data/moe_routing.json: " + s.model.moe->rank_imbalance_source;
  }
  j["engine"] = {{"max_num_seqs", r.engine.max_num_seqs},
                 {"max_num_batched_tokens", r.engine.max_num_batched_tokens},
                 {"block_size", r.engine.block_size},
                 {"gpu_memory_utilization", r.engine.gpu_memory_utilization},
                 {"chunked_prefill", r.chunked_prefill},
                 {"cuda_graphs", r.engine.cuda_graphs},
                 {"cuda_graph_max_tokens", r.engine.cuda_graph_max_tokens},
                 {"graph_prefill_steps", r.engine.graph_prefill_steps},
                 {"piecewise_graph_us_per_layer", r.engine.piecewise_graph_s_per_layer * 1e6},
                 {"piecewise_graph_us_per_mla_layer", r.engine.piecewise_graph_s_per_mla_layer * 1e6},
                 {"full_graph_decode_steps", r.engine.full_graph_decode_steps},
                 {"mixed_prefill_decode", r.engine.mixed_prefill_decode},
                 {"unchunked_prefill_unbounded", r.engine.unchunked_prefill_unbounded},
                 {"unchunked_prefill_with_decodes", r.engine.unchunked_prefill_with_decodes},
                 {"reserve_to_completion", r.engine.reserve_to_completion},
                 {"preempt_fewest_outputs", r.engine.preempt_fewest_outputs},
                 {"admission_output_ratio_init", r.engine.admission_output_ratio_init},
                 {"admission_output_ratio_min", r.engine.admission_output_ratio_min},
                 {"admission_output_ratio_decay_steps", r.engine.admission_output_ratio_decay_steps},
                 {"admission_output_clip", r.engine.admission_output_clip},
                 {"retract_decode_steps", r.engine.retract_decode_steps},
                 {"prefill_wait_ratio", r.engine.prefill_wait_ratio},
                 {"prefill_wait_steps", r.engine.prefill_wait_steps},
                 {"step_overhead_ms", r.engine.step_overhead_s * 1e3},
                 {"step_overhead_us_per_seq", r.engine.step_overhead_per_seq_s * 1e6},
                 {"host_overlaps_gpu", r.engine.host_overlaps_gpu},
                 {"request_overhead_ms", r.engine.request_overhead_s * 1e3},
                 {"eager_host_us_dense_layer", r.engine.eager_host_s_per_layer.value_or(r.engine.eager_host_s_dense_layer) * 1e6},
                 {"eager_host_us_moe_layer", r.engine.eager_host_s_per_layer.value_or(r.engine.eager_host_s_moe_layer) * 1e6},
                 {"moe_kernel", r.engine.moe_kernel.family},
                 {"grouped_topk_us", r.engine.grouped_topk_s * 1e6},
                 {"grouped_topk_ns_per_token", r.engine.grouped_topk_s_per_token * 1e9},
                 {"tp_all_reduce", r.engine.tp_all_reduce_nccl_only ? "nccl" : "engine_kernel"},
                 {"scheduler_steps", r.engine.scheduler_steps},
                 {"decode_heads_per_kv_load", r.engine.decode_heads_per_kv_load},
                 {"preemption", std::string(to_string(r.engine.preemption))},
                 {"swap_space_gib", r.engine.swap_space_bytes / (1024.0 * 1024.0 * 1024.0)}};
  j["engine"]["profile"] = {{"id", p.profile.id}, {"name", p.profile.name}, {"label", p.profile.label},
                            {"version", p.profile.version}, {"match", p.profile.match},
                            {"release_values", p.profile.release_values}};
  json resolved = json::object();
  resolved["engine_profile"] = p.profile.id;
  if (!p.engine.max_num_seqs) resolved["max_num_seqs"] = r.engine.max_num_seqs;
  if (!p.engine.max_num_batched_tokens) resolved["max_num_batched_tokens"] = r.engine.max_num_batched_tokens;
  if (!p.engine.block_size) resolved["block_size"] = r.engine.block_size;
  if (!p.engine.gpu_memory_utilization) resolved["gpu_memory_utilization"] = r.engine.gpu_memory_utilization;
  if (!p.engine.chunked_prefill) resolved["chunked_prefill"] = r.chunked_prefill;
  if (!p.engine.cuda_graphs) resolved["cuda_graphs"] = r.engine.cuda_graphs;
  if (!p.engine.cuda_graph_max_tokens) resolved["cuda_graph_max_tokens"] = r.engine.cuda_graph_max_tokens;
  // The context an engine that reads it sizes its step or its chunking by (vLLM V0).
  if (!p.engine.max_model_len && (r.engine.unchunked_budget_is_model_context || r.engine.chunked_prefill_above_context > 0))
    resolved["max_model_len"] = s.model.max_position;
  if (!p.ep) resolved["ep"] = r.ep;
  if (p.replicas_auto) resolved["replicas"] = p.replicas;
  if (p.tp_auto) resolved["tp"] = p.tp;
  if (p.pp_auto) resolved["pp"] = p.pp;
  if (p.workload.num_requests_auto) resolved["num_requests"] = p.workload.num_requests;
  if (p.weight_dtype_auto) resolved["weight_dtype"] = std::string(to_string(p.weight_dtype));
  if (p.activation_dtype_auto) resolved["activation_dtype"] = std::string(to_string(p.activation_dtype));
  if (!p.attention_dp && !p.ep && s.model.moe && p.tp > 1) resolved["attention_dp"] = r.attention_dp;
  if (!p.fp8_block_scaling && p.weight_dtype == DType::fp8 && p.activation_dtype == DType::fp8)
    resolved["fp8_scaling"] = s.model.fp8_weight_block > 0 ? "block" : "tensor";
  if (!p.kv_dtype) resolved["kv_dtype"] = std::string(to_string(p.weight_dtype == DType::fp8 ? DType::fp8 : DType::bf16));
  if (s.system.nic_auto) resolved["nic_gbps_per_gpu"] = s.system.nic_gbps_per_gpu;
  j["resolved"] = resolved;
  j["metrics"] = serving_metrics(r);
  j["slo"] = {{"ttft_ms", r.slo_ttft_s * 1e3}, {"tpot_ms", r.slo_tpot_s * 1e3}};
  j["run"] = {{"replications", 1},
              {"requests", r.requests.size()},
              {"duration_s", r.duration_s},
              {"iterations", r.iterations},
              {"preemptions", r.preemptions},
              {"peak_kv_utilization", r.peak_kv_utilization}};
  j["memory"] = {{"weights_bytes", r.memory.weights_bytes},
                 {"kv_cache_bytes_per_token", r.memory.kv_bytes_per_token},
                 {"num_blocks", r.memory.num_blocks},
                 {"max_cached_tokens", r.memory.max_cached_tokens},
                 {"fits", r.memory.fits}};
  // A request longer than the model's context: the engines refuse it at their default
  // maximum length (vLLM's max_model_len and SGLang's context_length are read from
  // max_position_embeddings), so it is simulated only as a context-extended model would run it.
  j["warnings"] = json::array();
  int64_t longest = 0;
  for (const RequestResult& q : r.requests) longest = std::max(longest, q.input + q.output);
  if (const std::optional<int64_t> max_len = p.engine.max_model_len; max_len && longest > *max_len)
    j["warnings"].push_back("the longest request, " + std::to_string(longest) +
                            " tokens with its output, exceeds engine.max_model_len " + std::to_string(*max_len) +
                            ": the engine refuses it; it runs here as if the server admitted it");
  else if (!max_len && s.model.max_position > 0 && longest > s.model.max_position)
    j["warnings"].push_back("the longest request, " + std::to_string(longest) +
                            " tokens with its output, exceeds the model's max_position_embeddings " +
                            std::to_string(s.model.max_position) +
                            ": engines refuse it at their default maximum length; it runs here as if the context were extended");
  if (!r.timeline.empty()) j["over_time"] = utilization_over_time(r, 20);
  if (r.busy.busy_s > 0) {
    // Where the engine time went over the run (every replica's iterations, summed).
    const BusyByPart& b = r.busy;
    j["busy_by_part"] = {{"parts_s", step_parts_array(b.steps, "s", 1.0)},
                         {"gpu_s", b.steps.gpu},
                         {"host_beyond_gpu_s", b.steps.seconds - b.steps.gpu},
                         {"drafts_s", b.drafts_s},
                         {"swaps_s", b.swaps_s},
                         {"busy_s", b.busy_s}};
  }
  return j;
}

json utilization_over_time(const ServingResult& r, int windows) {
  double t0 = r.timeline.front().start, t1 = r.timeline.front().end;
  int32_t replicas = 1;
  for (const auto& it : r.timeline) {
    t0 = std::min(t0, it.start);
    t1 = std::max(t1, it.end);
    replicas = std::max(replicas, it.replica + 1);
  }
  const double width = (t1 - t0) / windows;
  std::vector<double> busy(static_cast<size_t>(windows), 0.0), kv(busy), decode(busy), prefill(busy);
  for (const auto& it : r.timeline) {
    const double len = it.end - it.start;
    if (len <= 0 || width <= 0) continue;
    const int first = std::clamp(static_cast<int>((it.start - t0) / width), 0, windows - 1);
    const int last = std::clamp(static_cast<int>((it.end - t0) / width), 0, windows - 1);
    for (int w = first; w <= last; ++w) {
      const double lo = t0 + width * w, hi = lo + width;
      const double overlap = std::min(hi, it.end) - std::max(lo, it.start);
      if (overlap <= 0) continue;
      const size_t i = static_cast<size_t>(w);
      busy[i] += overlap;
      kv[i] += overlap * it.kv_utilization;
      // An iteration's tokens are spread over its duration.
      decode[i] += static_cast<double>(it.decode_tokens) * overlap / len;
      prefill[i] += static_cast<double>(it.prefill_tokens) * overlap / len;
    }
  }
  json rows = json::array();
  for (size_t i = 0; i < busy.size(); ++i) {
    const double capacity = width * replicas;
    rows.push_back({{"start_s", t0 + width * static_cast<double>(i)},
                    {"gpu_busy", capacity > 0 ? busy[i] / capacity : 0.0},
                    {"kv_utilization", busy[i] > 0 ? kv[i] / busy[i] : 0.0},
                    {"decode_tokens_per_s", width > 0 ? decode[i] / width : 0.0},
                    {"prefill_tokens_per_s", width > 0 ? prefill[i] / width : 0.0}});
  }
  return {{"window_s", width}, {"replicas", replicas}, {"windows", rows}};
}

json rl_iteration_json(const Scenario& s, const RlIteration& it) {
  const RlSpec& rl = *s.rl;
  json j = {{"generation_s", it.generation_s},
            {"scoring_s", it.scoring_s},
            {"training_s", it.training_s},
            {"resharding_s", it.resharding_s},
            {"offload_s", it.offload_s},
            {"step_time_s", it.step_time_s},
            {"throughput_tokens_per_s", it.throughput_tokens_per_s},
            {"bottleneck", it.bottleneck},
            {"placement", rl.placement == RlSpec::Placement::split ? "split" : "colocated"},
            {"overlapped", rl.placement == RlSpec::Placement::split && rl.async_staleness >= 1},
            {"prompts_per_step", rl.prompts_per_step},
            {"group_size", rl.group_size},
            {"samples", it.samples},
            {"prompt_tokens", it.prompt_tokens},
            {"prompt_tokens_source", it.prompt_auto ? "auto: kRlAutoPromptTokens (core/include/capsim/core/posttrain.hpp)"
                                                    : "scenario"},
            {"response_tokens",
             {{"mean", rl.response_mean},
              {"cap", it.response_cap},
              {"dist", it.response_scale > 0 ? "exponential truncated at cap" : rl.response_fixed ? "fixed" : "all at cap"},
              {"scale", it.response_scale},
              {"longest", it.longest_response}}},
            {"tokens_per_step", it.tokens_per_step},
            {"rollout",
             {{"gpus", rl.rollout_gpus},
              {"tp", rl.rollout.tp},
              {"pp", rl.rollout.pp},
              {"replicas", it.rollout_replicas},
              {"inflight_iterations", it.rollout_inflight_iterations},
              {"engine_profile", rl.rollout.profile.id},
              {"iterations", it.rollout_iterations},
              {"preemptions", it.rollout_preemptions},
              {"peak_kv_utilization", it.rollout_peak_kv_utilization}}},
            {"update",
             {{"gpus", rl.train_gpus},
              {"ppo_epochs", rl.ppo_epochs},
              {"mini_batches", it.mini_batches},
              {"seq_len", it.train_seq_len},
              {"step_s", it.update_step_s}}},
            {"forward_pass_s", it.forward_pass_s},
            {"refit_bytes_per_gpu", it.refit_bytes_per_gpu},
            {"offload_bytes_per_gpu", it.offload_bytes_per_gpu},
            {"reference_swap_s", it.reference_swap_s},
            {"reference_swap_bytes_per_gpu", it.reference_swap_bytes_per_gpu},
            {"status", it.feasible ? "ok" : "does_not_fit"}};
  if (!it.feasible) j["fail_reason"] = it.fail_reason;
  if (!rl.auto_keys.empty()) j["resolved_auto"] = rl.auto_keys;
  if (!it.pool_search.empty()) {
    json tried = json::array();
    for (const RlPoolTry& t : it.pool_search) {
      json one = {{"rollout_gpus", t.rollout_gpus}, {"train_gpus", t.train_gpus}, {"step_time_s", t.step_time_s},
                  {"status", t.feasible ? "ok" : "does_not_fit"}};
      if (!t.feasible) one["fail_reason"] = t.fail_reason;
      tried.push_back(std::move(one));
    }
    j["pool_search"] = std::move(tried);
  }
  return j;
}

json rl_train_report(const Scenario& s, const RlIteration& it) {
  Scenario trainer = s;
  trainer.system.num_gpus = s.rl->train_gpus;
  json r = train_report(trainer, it.update);
  r["system"]["num_gpus"] = s.system.num_gpus;
  r["rl"] = rl_iteration_json(s, it);
  if (!it.feasible) {
    r["status"] = "does_not_fit";
    r["fail_reason"] = it.fail_reason;
  }
  r["engine"] = "analytical";
  return r;
}

json frozen_step_json(const Scenario& s, const FrozenModelStep& st) {
  const bool pref = s.training && is_preference(s.training->mode);
  const std::string trained = pref ? "policy" : "student";
  const std::string frozen = pref ? "reference" : "teacher";
  json j = {{"mode", std::string(to_string(s.training->mode))},
            {"step_time_s", st.step_time_s},
            {trained + "_s", st.trained_s},
            {frozen + "_s", st.frozen_s},
            {"overlapped", st.overlapped},
            {"sequences", st.sequences},
            {"tokens_per_step", st.tokens_per_step},
            {"throughput_tokens_per_s", st.throughput_tokens_per_s},
            {"model_flops_per_step", st.model_flops_per_step},
            {frozen + "_flops_per_step", st.frozen_flops_per_step},
            {"notes", st.notes},
            {"status", st.feasible ? "ok" : "does_not_fit"}};
  if (pref) {
    const PreferenceSpec p = s.preference.value_or(PreferenceSpec{});
    j["pairs"] = st.pairs;
    j["reference"] = p.reference == PreferenceSpec::Reference::model         ? "model"
                     : p.reference == PreferenceSpec::Reference::precomputed ? "precomputed"
                                                                              : "none";
    if (p.prompt_tokens) j["prompt_tokens"] = *p.prompt_tokens;
    if (p.response_tokens) j["response_tokens"] = *p.response_tokens;
    if (!p.auto_keys.empty()) j["resolved_auto"] = p.auto_keys;
  } else if (s.distill) {
    const DistillSpec& d = *s.distill;
    j["placement"] = d.placement == DistillSpec::Placement::split         ? "split"
                     : d.placement == DistillSpec::Placement::precomputed ? "precomputed"
                                                                          : "colocated";
    j["teacher"] = {{"name", d.teacher.name}, {"params_total", count_params(d.teacher).total}};
    if (d.placement == DistillSpec::Placement::split) j["teacher_gpus"] = d.teacher_gpus;
    j["logits_s"] = st.logits_s;
    j["logits_bytes"] = st.logits_bytes;
    if (!d.auto_keys.empty()) j["resolved_auto"] = d.auto_keys;
  }
  if (!st.feasible) j["fail_reason"] = st.fail_reason;
  return j;
}

json frozen_step_report(const Scenario& s, const FrozenModelStep& st) {
  Scenario trainer = s;
  if (s.distill && s.distill->placement == DistillSpec::Placement::split)
    trainer.system.num_gpus = s.system.num_gpus - s.distill->teacher_gpus;
  json r = train_report(trainer, st.trained);
  r["system"]["num_gpus"] = s.system.num_gpus;
  r["layout"]["mode"] = std::string(to_string(s.training->mode));
  r["post_training"] = frozen_step_json(s, st);
  if (!st.feasible) {
    r["status"] = "does_not_fit";
    r["fail_reason"] = st.fail_reason;
  }
  r["engine"] = "analytical";
  return r;
}

json analytical_train_report(const Scenario& s, const TrainEvaluation& ev) {
  json r = train_report(s, ev);
  r["engine"] = "analytical";
  return r;
}

json operators_json(const std::vector<OperatorTime>& rows, int64_t microbatches_per_step) {
  double compute = 0, communication = 0;
  for (const OperatorTime& o : rows) (o.communication ? communication : compute) += o.pass_s();
  json out = json::array();
  for (const OperatorTime& o : rows) {
    const double pass = o.pass_s();
    json j = {{"block", o.block},   {"name", o.name},   {"count", o.count},       {"fwd_s", o.fwd_s},
              {"bwd_s", o.bwd_s},   {"recompute_s", o.recompute_s}, {"pass_s", pass}, {"communication", o.communication}};
    if (!o.communication) j["share"] = compute > 0 ? pass / compute : 0.0;
    if (o.fwd_flops > 0 && o.fwd_s > 0) j["fwd_tflops"] = o.fwd_flops / o.fwd_s / 1e12;
    out.push_back(std::move(j));
  }
  return {{"scope", "one microbatch through the whole model on one GPU: seconds per run, and per pass (count runs); "
                    "communication before overlap"},
          {"microbatches_per_step", microbatches_per_step},
          {"compute_pass_s", compute},
          {"communication_pass_s", communication},
          {"rows", std::move(out)}};
}

json serving_does_not_fit_report(const Scenario& s, const std::string& reason) {
  json r = {{"schema", "capsim-serving-report/1"}, {"id", s.id}, {"status", "does_not_fit"}, {"reason", reason}};
  const InferenceMemory mem = inference_memory(s.model, s.system, *s.inference);
  r["memory"] = {{"weights_bytes", mem.weights_bytes}, {"kv_cache_bytes_per_token", mem.kv_bytes_per_token},
                 {"num_blocks", mem.num_blocks}, {"fits", mem.fits}};
  return r;
}

std::vector<std::pair<std::string, double>> busy_shares(const json& b) {
  const double busy = b.at("busy_s").get<double>();
  std::vector<std::pair<std::string, double>> shares;
  auto add = [&](const std::string& name, double seconds) { shares.emplace_back(name, busy > 0 ? seconds / busy : 0.0); };
  for (const auto& p : b.at("parts_s")) add(p.at("part").get<std::string>(), p.at("s").get<double>());
  add("host", b.at("host_beyond_gpu_s").get<double>());
  add("drafts", b.at("drafts_s").get<double>());
  add("swaps", b.at("swaps_s").get<double>());
  std::stable_sort(shares.begin(), shares.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  return shares;
}

json serving_step_report(const Scenario& s, const IterationBatch& b, const ServingStep& st) {
  const InferencePlan& p = *s.inference;
  const StepParts& t = st.parts;
  const double ms = 1e3;
  json r = {{"schema", "capsim-serving-step/1"}, {"id", s.id}};
  r["model"] = {{"name", s.model.name}, {"params_total", count_params(s.model).total}};
  r["layout"] = {{"tp", p.tp}, {"pp", p.pp}, {"ep", st.ep}, {"attention_dp", st.attention_dp},
                 {"weight_dtype", std::string(to_string(p.weight_dtype))},
                 {"activation_dtype", std::string(to_string(p.activation_dtype))}};
  r["engine"] = {{"profile", p.profile.id}, {"label", p.profile.label}, {"version", p.profile.version}};
  const int64_t context = b.decodes > 0 ? std::llround(b.decode_context / static_cast<double>(b.decodes)) : 0;
  r["batch"] = {{"decodes", b.decodes},
                {"context_tokens", context},
                {"prompt_tokens", b.prefills.empty() ? 0 : b.prefills.front().tokens},
                {"prompt_cached_tokens", b.prefills.empty() ? 0 : b.prefills.front().cached}};
  // Every part, in the order a layer runs them; the GPU time is their sum.
  r["parts_ms"] = step_parts_array(t, "ms", ms);
  r["gpu_ms"] = t.gpu * ms;
  r["host_ms"] = t.host * ms;
  r["host_overlaps_gpu"] = t.host_overlaps_gpu;
  r["step_ms"] = t.seconds * ms;
  r["cuda_graph"] = {{"replayed", st.graph_replay},
                     {"max_tokens", st.graph_max_tokens},
                     {"prompt_steps", st.graph_prefill_steps}};
  return r;
}

std::string dump(const json& j) { return dump_text(j, 2) + "\n"; }

}  // namespace capsim::io
