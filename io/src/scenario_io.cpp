#include "capsim/io/scenario_io.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <tuple>

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/posttrain.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"

namespace capsim::io {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json::json_pointer to_pointer(const std::string& path) {
  if (!path.empty() && path[0] == '/') return json::json_pointer(path);
  std::string p;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    p += "/" + pointer_escape(part);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return json::json_pointer(p);
}

bool parse_dtype(const std::string& s, DType& d) {
  static const std::pair<const char*, DType> table[] = {
      {"fp32", DType::fp32}, {"bf16", DType::bf16}, {"fp16", DType::fp16}, {"fp8", DType::fp8},
      {"int8", DType::int8}, {"int4", DType::int4}, {"fp4", DType::fp4},
  };
  for (const auto& [n, v] : table)
    if (s == n) {
      d = v;
      return true;
    }
  return false;
}

const std::vector<std::string> kDtypes = {"bf16", "fp16", "fp8", "int8", "int4"};

void read_system(ObjectReader& r, SystemSpec& sys, std::vector<Issue>& issues) {
  std::string gpu;
  if (r.string("gpu", gpu, true)) {
    try {
      sys.gpu = load_gpu(gpu, r.at("gpu"));
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  }
  r.integer("num_gpus", sys.num_gpus, true);
  // "auto" (not published) is the default, as absent: the 8-GPU baseboard of the reference
  // nodes (DGX/HGX A100, H100, H200, H800, B200; hardware.json nodes).
  if (!r.left_auto("gpus_per_node")) r.integer("gpus_per_node", sys.gpus_per_node, false);
  // "auto" where the source did not publish it (SCHEMA.md): the reference node's rate of the
  // GPU (none for PCIe boards: a multi-node job then reports it as required below).
  if (r.left_auto("nic_gbps_per_gpu")) {
    sys.nic_auto = true;
    sys.nic_gbps_per_gpu = sys.gpu.reference_nic_gbps_per_gpu;
  } else
    r.number("nic_gbps_per_gpu", sys.nic_gbps_per_gpu, false, 0);
  // Host links, read with offload and precomputed teacher logits (SCHEMA.md, "Post-training
  // cases"): GB/s, or "auto" where unpublished.
  for (const auto& [key, out] : {std::pair<const char*, std::optional<double>*>{"pcie_gbps_per_gpu", &sys.pcie_gbps_per_gpu},
                                 {"nvme_gbps_per_node", &sys.nvme_gbps_per_node}}) {
    const json* v = r.get(key);
    if (!v || (v->is_string() && *v == "auto")) continue;
    if (!v->is_number() || !(v->get<double>() > 0))
      issues.push_back({r.at(key), brief(*v), "must be a number > 0 (GB/s) or \"auto\"", {}});
    else
      *out = v->get<double>();
  }
  r.finish();
}

/// A model of `rl.models`: "model" (the case's), "rule" (reward only), null, or an HF
/// config object.
RlModel read_rl_model(const json& v, const std::string& ptr, bool rule_ok, std::vector<Issue>& issues) {
  RlModel m;
  if (v.is_null()) return m;
  if (v.is_string() && v == "model") {
    m.kind = RlModel::Kind::actor;
  } else if (v.is_string() && v == "rule" && rule_ok) {
    m.kind = RlModel::Kind::rule;
  } else if (v.is_object()) {
    m.kind = RlModel::Kind::other;
    try {
      m.config = model_from_hf_config(v, ptr, "");
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  } else {
    issues.push_back({ptr, brief(v),
                      rule_ok ? "must be \"model\", \"rule\", null or an HF config object"
                              : "must be \"model\", null or an HF config object",
                      {}});
  }
  return m;
}

/// Bytes per frozen base weight stored as NF4: 4-bit codes plus one fp32 absmax per
/// 64-weight block; with double quantization an 8-bit absmax and one fp32 constant per 256
/// blocks (Dettmers et al. 2023, QLoRA, Sec. 2-3).
constexpr double kNf4BytesPerParam = 0.5 + 4.0 / 64;
constexpr double kNf4DoubleQuantBytesPerParam = 0.5 + 1.0 / 64 + 4.0 / (64 * 256);

/// `rl.rollout.engine`: the engine and release select the profile; the knobs a rollout
/// sets are read on top (SCHEMA.md: as `inference.engine`).
void read_rl_engine(const json& e, const std::string& ptr, InferencePlan& p, EngineKeys engine_keys,
                    std::vector<Issue>& issues) {
  ObjectReader er(e, ptr, issues);
  std::string name, version;
  // "auto": NeMo RL's generation backend, vLLM (examples/configs/grpo_math_1B.yaml,
  // policy.generation.backend), at the version the case gives.
  if (er.left_auto("name")) name = "vllm";
  else er.string("name", name, true);
  er.string("version", version);
  // "auto" (not published) leaves the engine's default, as under inference.engine.
  std::optional<double> u;
  if (er.fraction_or_auto("gpu_memory_utilization", u) && u) p.engine.gpu_memory_utilization = u;
  std::optional<int64_t> v;
  if (er.integer_or_auto("max_num_seqs", v) && v) p.engine.max_num_seqs = v;
  v.reset();
  if (er.integer_or_auto("max_num_batched_tokens", v) && v) p.engine.max_num_batched_tokens = v;
  if (engine_keys == EngineKeys::ignore_unknown)
    for (auto it = e.begin(); it != e.end(); ++it) er.allow(it.key());
  er.finish();
  if (!name.empty()) {
    try {
      p.profile = select_engine_profile(name, version, ptr);
    } catch (const InputError& err) {
      issues.insert(issues.end(), err.issues().begin(), err.issues().end());
    }
  }
}

/// The `rl` block of a ppo/grpo case (SCHEMA.md, "Post-training cases").
void read_rl(const json& given, const std::string& ptr, const TrainingPlan& t, bool dp_stated, const Scenario& sc,
             std::optional<RlSpec>& out, int64_t num_gpus, EngineKeys engine_keys, std::vector<Issue>& issues) {
  // The whole block "auto" (nothing published but the batch and the sequence): every key
  // "auto", each resolved below.
  json every_key_auto;
  if (given.is_string() && given == "auto") {
    every_key_auto = json::object();
    for (const char* k : {"algorithm", "prompts_per_step", "group_size", "prompt_tokens", "response_tokens",
                          "max_total_tokens", "ppo_epochs", "mini_batches", "async_staleness", "placement", "gpus",
                          "rollout", "models"})
      every_key_auto[k] = "auto";
  }
  const json& v = every_key_auto.is_object() ? every_key_auto : given;
  if (!v.is_object()) {
    issues.push_back({ptr, brief(v), "must be an object or \"auto\"", {}});
    return;
  }
  ObjectReader r(v, ptr, issues);
  RlSpec rl;
  std::string s;
  // A key left "auto" (SCHEMA.md: not published) takes the value the rest of the case
  // implies, else NeMo RL's default (kNemoRl*, core/include/capsim/core/posttrain.hpp);
  // rl.auto_keys lists them for the report.
  auto left_auto = [&](const char* key) {
    const bool a = r.left_auto(key);
    if (a) rl.auto_keys.emplace_back(key);
    return a;
  };
  if (!left_auto("algorithm")) r.choice("algorithm", s, {"ppo", "grpo", "rloo", "reinforce++", "dapo"});
  const bool prompts_auto = left_auto("prompts_per_step");
  if (!prompts_auto) r.integer("prompts_per_step", rl.prompts_per_step, true);
  const bool group_auto = left_auto("group_size");
  if (!group_auto) r.integer("group_size", rl.group_size, true);
  if (const json* pt = r.get("prompt_tokens")) {
    if (pt->is_string() && *pt == "auto") {
      rl.prompt_tokens = std::nullopt;
      rl.auto_keys.emplace_back("prompt_tokens");
    } else if (pt->is_number() && pt->get<double>() >= 1) {
      rl.prompt_tokens = pt->get<double>();
    } else if (pt->is_object()) {
      ObjectReader pr(*pt, r.at("prompt_tokens"), issues);
      double mean = 1;
      if (pr.number("mean", mean, true, 1)) rl.prompt_tokens = mean;
      pr.allow("max");  // the prompt is prefilled once: its mean is what costs
      pr.allow("dist");
      pr.finish();
    } else {
      issues.push_back({r.at("prompt_tokens"), brief(*pt), "must be a number >= 1, {\"mean\": m} or \"auto\"", {}});
    }
  }
  bool response_auto = false, response_max_auto = false;
  if (const json* rt = r.get("response_tokens")) {
    if (left_auto("response_tokens")) {
      response_auto = true;  // resolved below, once the cap is known
    } else if (rt->is_number() && rt->get<double>() >= 1) {
      rl.response_mean = rt->get<double>();
      rl.response_fixed = true;
    } else if (rt->is_object()) {
      ObjectReader rr(*rt, r.at("response_tokens"), issues);
      // An unpublished mean: as response_tokens "auto", half the longest response (below).
      if (rr.left_auto("mean")) {
        response_auto = true;
        rl.auto_keys.emplace_back("response_tokens.mean");
      } else {
        rr.number("mean", rl.response_mean, true, 1);
      }
      std::string dist;
      if (rr.choice("dist", dist, {"fixed", "exponential"})) rl.response_fixed = dist == "fixed";
      // An unpublished longest response is the cap's (max_total_tokens, else seq_len).
      response_max_auto = rr.left_auto("max");
      if (response_max_auto)
        rl.auto_keys.emplace_back("response_tokens.max");
      else
        rr.number("max", rl.response_max, !rl.response_fixed && !v.contains("max_total_tokens"), 1);
      rr.finish();
      if (!response_auto && rl.response_max > 0 && rl.response_mean > rl.response_max)
        issues.push_back({r.at("response_tokens"), brief(*rt), "mean must not exceed max", {}});
    } else {
      issues.push_back({r.at("response_tokens"), brief(*rt), "must be a number >= 1, {\"mean\", \"max\"} or \"auto\"", {}});
    }
  } else {
    issues.push_back({r.at("response_tokens"), "", "is required (a number or {\"mean\", \"max\"})", {}});
  }
  // The case's seq_len is the longest prompt + response (SCHEMA.md, `training.mode`).
  if (left_auto("max_total_tokens")) rl.max_total_tokens = t.seq_len;
  else r.integer("max_total_tokens", rl.max_total_tokens);
  if (response_max_auto && rl.max_total_tokens == 0)
    rl.response_max = std::max(1.0, static_cast<double>(t.seq_len) - rl_prompt_tokens(rl));
  if (response_auto) {
    // Nothing but the cap is known: the mean of the maximum-entropy law on [0, cap], half
    // the cap, spread as a response of a given mean is (rl_response_scale).
    const double total = static_cast<double>(rl.max_total_tokens > 0 ? rl.max_total_tokens : t.seq_len);
    if (rl.max_total_tokens == 0 && rl.response_max <= 0) rl.response_max = std::max(1.0, total - rl_prompt_tokens(rl));
    const double cap = rl_response_cap(rl);
    rl.response_mean = std::max(1.0, (cap > 0 ? cap : total - rl_prompt_tokens(rl)) / 2.0);
    rl.response_fixed = false;
  }
  if (!left_auto("ppo_epochs")) r.integer("ppo_epochs", rl.ppo_epochs);
  r.integer_or_auto("mini_batches", rl.mini_batches);
  if (!left_auto("async_staleness")) r.integer("async_staleness", rl.async_staleness, false, 0);
  const bool placement_auto = left_auto("placement");
  if (!placement_auto && r.choice("placement", s, {"colocated", "split"}, true))
    rl.placement = s == "split" ? RlSpec::Placement::split : RlSpec::Placement::colocated;
  const json* g = r.get("gpus");
  // Pools whose sizes the source left "auto" are the whole object's "auto"; one stated
  // beside an "auto" sizes the other (below, once the placement is known).
  const auto member_auto = [&](const char* k) {
    return g && g->is_object() && g->contains(k) && (*g)[k].is_string() && (*g)[k] == "auto";
  };
  const bool rollout_member_auto = member_auto("rollout"), train_member_auto = member_auto("train");
  const bool gpus_auto = left_auto("gpus") || (rollout_member_auto && train_member_auto);
  if (rollout_member_auto && train_member_auto) rl.auto_keys.emplace_back("gpus");
  if (placement_auto && g && g->is_object() && !gpus_auto) {
    // The pools say it: both roles on every GPU, or two pools that add up to them; one pool
    // stated beside an "auto" one is split when it leaves GPUs over.
    const json* ro = g->contains("rollout") ? &(*g)["rollout"] : nullptr;
    const json* tr = g->contains("train") ? &(*g)["train"] : nullptr;
    const json* stated = rollout_member_auto ? tr : train_member_auto ? ro : nullptr;
    if (stated) {
      if (stated->is_number_integer() && stated->get<int64_t>() < num_gpus) rl.placement = RlSpec::Placement::split;
    } else if (ro && tr && ro->is_number_integer() && tr->is_number_integer() &&
               ro->get<int64_t>() + tr->get<int64_t>() == num_gpus && ro->get<int64_t>() < num_gpus) {
      rl.placement = RlSpec::Placement::split;
    }
  } else if (placement_auto && (gpus_auto || !g) && dp_stated && !(t.auto_layout & (kAutoTp | kAutoPp | kAutoCp)) &&
             t.dp * t.tp * t.pp * t.cp < num_gpus) {
    // No pools either: an update layout stated on fewer GPUs than the job has leaves the
    // rest to generation.
    rl.placement = RlSpec::Placement::split;
  }
  if (rl.placement == RlSpec::Placement::colocated && rl.async_staleness > 0)
    issues.push_back({r.at("async_staleness"), std::to_string(rl.async_staleness),
                      "needs placement \"split\": colocated generation and training take turns on the same GPUs",
                      "set async_staleness to 0, or placement to \"split\""});
  bool gpus_ok = false;
  if (gpus_auto) {
    if (rl.placement == RlSpec::Placement::colocated) {
      rl.rollout_gpus = rl.train_gpus = num_gpus;  // colocated roles share every GPU
      gpus_ok = num_gpus >= 1;
    } else if (dp_stated && !(t.auto_layout & (kAutoTp | kAutoPp | kAutoCp))) {
      // The update layout sizes the training pool; the rollout pool has the rest.
      const int64_t train = t.dp * t.tp * t.pp * t.cp;
      if (train >= num_gpus) {
        issues.push_back({r.at("gpus"), "\"auto\"",
                          "the update layout (dp x tp x pp x cp = " + std::to_string(train) + ") leaves none of the " +
                              std::to_string(num_gpus) + " GPUs to the rollout pool",
                          "state {\"rollout\": n, \"train\": n}, a smaller dp, or placement \"colocated\""});
      } else {
        rl.train_gpus = train;
        rl.rollout_gpus = num_gpus - train;
        gpus_ok = true;
      }
    } else {
      // Neither the case nor its layout sizes the pools: the evaluation takes the fastest
      // split (resolve_rl_pools).
      rl.pools_auto = true;
    }
  } else if (!g) {
    issues.push_back({r.at("gpus"), "", "is required ({\"rollout\": n, \"train\": n})", {}});
  } else if (!g->is_object()) {
    issues.push_back({r.at("gpus"), brief(*g), "must be an object", {}});
  } else {
    ObjectReader gr(*g, r.at("gpus"), issues);
    // One pool "auto": colocated roles share every GPU; split pools take the rest.
    const auto other = [&](int64_t stated) {
      return rl.placement == RlSpec::Placement::colocated ? num_gpus : num_gpus - stated;
    };
    bool rollout_ok = false;
    if (rollout_member_auto) {
      rl.auto_keys.emplace_back("gpus.rollout");
      gr.allow("rollout");
      gpus_ok = gr.integer("train", rl.train_gpus, true);
      rl.rollout_gpus = other(rl.train_gpus);
      rollout_ok = true;
    } else if (train_member_auto) {
      rl.auto_keys.emplace_back("gpus.train");
      gr.allow("train");
      rollout_ok = gr.integer("rollout", rl.rollout_gpus, true);
      rl.train_gpus = other(rl.rollout_gpus);
      gpus_ok = rollout_ok;
    } else {
      rollout_ok = gr.integer("rollout", rl.rollout_gpus, true);
      gpus_ok = gr.integer("train", rl.train_gpus, true) && rollout_ok;
    }
    if (gpus_ok && (rl.rollout_gpus < 1 || rl.train_gpus < 1))
      issues.push_back({r.at("gpus"), brief(*g), "split pools: the stated pool leaves no GPU to the one left \"auto\"",
                        "state both pools, or placement \"colocated\""});
    for (const char* k : {"critic", "reward", "reference"}) {
      std::optional<int64_t> n;
      gr.integer_or_auto(k, n);
    }
    gr.finish();
    const std::string n = std::to_string(num_gpus);
    if (gpus_ok && rl.placement == RlSpec::Placement::colocated && (rl.rollout_gpus != num_gpus || rl.train_gpus != num_gpus))
      issues.push_back({r.at("gpus"), brief(*g), "colocated roles share every GPU: rollout and train must both equal num_gpus (" + n + ")", {}});
    if (gpus_ok && rl.placement == RlSpec::Placement::split && rl.rollout_gpus + rl.train_gpus != num_gpus)
      issues.push_back({r.at("gpus"), brief(*g), "split pools: rollout + train must equal num_gpus (" + n + ")", {}});
  }
  // The rollout engine. Absent keys and "auto": the default engine profile, the training
  // precision, pipeline parallelism off and the smallest tensor-parallel degree whose
  // replica fits (vLLM's and NeMo RL's defaults are 1 and 1, which a model too large for one
  // GPU cannot run).
  const json* ro = r.get("rollout");
  const bool rollout_auto = ro && left_auto("rollout");
  bool tp_auto = rollout_auto;
  InferencePlan& p = rl.rollout;
  p.weight_dtype = p.activation_dtype = t.precision == DType::fp8 ? DType::fp8 : t.precision;
  p.kv_dtype = std::nullopt;  // the engine's default: the model's dtype
  auto default_engine = [&](const std::string& at) {
    try {
      p.profile = select_engine_profile("", "", at);
    } catch (const InputError& err) {
      issues.insert(issues.end(), err.issues().begin(), err.issues().end());
    }
  };
  if (!ro) {
    issues.push_back({r.at("rollout"), "", "is required (engine, tp, pp)", {}});
  } else if (rollout_auto) {
    default_engine(r.at("rollout") + "/engine");
  } else if (!ro->is_object()) {
    issues.push_back({r.at("rollout"), brief(*ro), "must be an object", {}});
  } else {
    ObjectReader rr(*ro, r.at("rollout"), issues);
    std::optional<int64_t> degree = 1;
    if (rr.integer_or_auto("tp", degree)) {
      if (degree) p.tp = *degree;
      tp_auto = !degree;
    }
    degree = 1;
    if (rr.integer_or_auto("pp", degree)) p.pp = degree.value_or(1);
    std::optional<int64_t> ep = 1;
    // Absent: vLLM's default, expert parallelism off (enable_expert_parallel False): the
    // experts are sharded over the tensor-parallel ranks.
    if (rr.integer_or_auto("ep", ep)) p.ep = ep;
    if (rr.choice("precision", s, {"bf16", "fp16", "fp8"}, false, true) && s != "auto") {
      parse_dtype(s, p.weight_dtype);
      p.activation_dtype = p.weight_dtype == DType::fp8 ? DType::fp8 : p.weight_dtype;
    }
    const bool engine_auto = rr.left_auto("engine");
    if (engine_auto) rl.auto_keys.emplace_back("rollout.engine");
    if (const json* e = rr.get("engine"); e && !engine_auto) {
      if (!e->is_object()) issues.push_back({rr.at("engine"), brief(*e), "must be an object or \"auto\"", {}});
      else read_rl_engine(*e, rr.at("engine"), p, engine_keys, issues);
    } else {
      default_engine(rr.at("engine"));
    }
    rr.finish();
  }
  if (tp_auto) {
    rl.auto_keys.emplace_back("rollout.tp");
    rl.rollout_tp_auto = true;
    p.tp = issues.empty() && gpus_ok ? rl_auto_rollout_tp(sc.model, sc.system, p, rl.rollout_gpus) : 1;
  }
  if (ro && gpus_ok && p.tp >= 1 && p.pp >= 1 && rl.rollout_gpus % (p.tp * p.pp) != 0)
    issues.push_back({r.at("rollout") + "/tp", std::to_string(p.tp),
                      "tp*pp = " + std::to_string(p.tp * p.pp) + " must divide gpus.rollout = " + std::to_string(rl.rollout_gpus), {}});
  // The algorithm's usual roles, for the block absent or "auto" and for a role left "auto":
  // GRPO's rule reward and a reference for the KL term; PPO adds a critic.
  const RlModel::Kind usual_critic = t.mode == TrainMode::ppo ? RlModel::Kind::actor : RlModel::Kind::none;
  const json* m = r.get("models");
  if (m && left_auto("models")) m = nullptr;
  if (m && !m->is_object()) {
    issues.push_back({r.at("models"), brief(*m), "must be an object", {}});
  } else if (m) {
    ObjectReader mr(*m, r.at("models"), issues);
    const auto role_auto = [&](const char* role) {
      const bool a = mr.left_auto(role);
      if (a) rl.auto_keys.push_back(std::string("models.") + role);
      return a;
    };
    if (const json* a = mr.get("actor"); a && !role_auto("actor") && !(a->is_string() && *a == "model"))
      issues.push_back({mr.at("actor"), brief(*a), "must be \"model\" (the case's model is the actor)", {}});
    if (role_auto("critic")) rl.critic.kind = usual_critic;
    else if (const json* c = mr.get("critic")) rl.critic = read_rl_model(*c, mr.at("critic"), false, issues);
    if (role_auto("reward")) rl.reward.kind = RlModel::Kind::rule;
    else if (const json* c = mr.get("reward")) rl.reward = read_rl_model(*c, mr.at("reward"), true, issues);
    if (role_auto("reference")) rl.reference.kind = RlModel::Kind::actor;
    else if (const json* c = mr.get("reference")) rl.reference = read_rl_model(*c, mr.at("reference"), false, issues);
    mr.finish();
  } else {
    rl.critic.kind = usual_critic;
    rl.reward.kind = RlModel::Kind::rule;
    rl.reference.kind = RlModel::Kind::actor;
  }
  // Samples per iteration: global_batch sequences an optimizer step times mini_batches.
  const std::optional<int64_t> samples =
      rl.mini_batches ? std::optional<int64_t>(t.global_batch * *rl.mini_batches) : std::nullopt;
  if (group_auto) {
    if (t.mode == TrainMode::ppo) rl.group_size = 1;  // PPO samples once a prompt
    else if (!prompts_auto && samples && *samples % rl.prompts_per_step == 0) rl.group_size = *samples / rl.prompts_per_step;
    else rl.group_size = kNemoRlGenerationsPerPrompt;
  }
  if (prompts_auto) {
    // Without mini_batches, one optimizer step an iteration (NeMo RL's default batch).
    const int64_t n = samples.value_or(t.global_batch);
    rl.prompts_per_step = std::max<int64_t>(1, n / std::max<int64_t>(1, rl.group_size));
  }
  std::sort(rl.auto_keys.begin(), rl.auto_keys.end());
  r.finish();
  out = rl;
}

/// A mean token count of `preference`: a number >= 1 or {"mean", "dist", "max"}.
void read_mean_tokens(const json& v, const std::string& ptr, std::optional<double>& out, std::vector<Issue>& issues) {
  if (v.is_number() && v.get<double>() >= 1) {
    out = v.get<double>();
  } else if (v.is_object()) {
    ObjectReader r(v, ptr, issues);
    double mean = 1, max = 0;
    const bool has_mean = r.number("mean", mean, true, 1);
    r.number("max", max, false, 1);
    std::string dist;
    r.string("dist", dist);
    r.finish();
    if (has_mean && max > 0 && mean > max) issues.push_back({ptr, brief(v), "mean must not exceed max", {}});
    else if (has_mean) out = mean;
  } else {
    issues.push_back({ptr, brief(v), "must be a number >= 1 or {\"mean\", \"dist\", \"max\"}", {}});
  }
}

/// The `preference` block of a dpo/simpo/orpo case (SCHEMA.md, "Post-training cases"). Each
/// pair is a chosen and a rejected sequence, so global_batch (sequences) is 2 x pairs.
void read_preference(const json* v, const std::string& ptr, const TrainingPlan& t, std::optional<PreferenceSpec>& out,
                     std::vector<Issue>& issues) {
  const std::string mode(to_string(t.mode));
  PreferenceSpec p;
  p.reference = t.mode == TrainMode::dpo ? PreferenceSpec::Reference::model : PreferenceSpec::Reference::none;
  bool pairs_given = false;
  // "auto" (SCHEMA.md: not published), the block's or a key's: what the rest of the case
  // and the mode say, as absent (pairs from global_batch, the mode's reference).
  if (v && v->is_string() && *v == "auto") {
    v = nullptr;
    p.auto_keys.emplace_back("preference");
  }
  if (v && !v->is_object()) {
    issues.push_back({ptr, brief(*v), "must be an object or \"auto\"", {}});
    return;
  }
  if (v) {
    ObjectReader r(*v, ptr, issues);
    if (r.left_auto("pairs_per_step")) p.auto_keys.emplace_back("pairs_per_step");
    else pairs_given = r.integer("pairs_per_step", p.pairs_per_step);
    for (const char* key : {"prompt_tokens", "response_tokens"}) {
      std::optional<double>& out_tokens = std::string(key) == "prompt_tokens" ? p.prompt_tokens : p.response_tokens;
      if (r.left_auto(key)) {
        p.auto_keys.emplace_back(key);
        continue;
      }
      if (const json* x = r.get(key)) read_mean_tokens(*x, r.at(key), out_tokens, issues);
    }
    std::string ref;
    const bool ref_auto = r.left_auto("reference");
    if (ref_auto) p.auto_keys.emplace_back("reference");
    if (!ref_auto && r.choice("reference", ref, {"model", "precomputed", "none"})) {
      p.reference = ref == "model"         ? PreferenceSpec::Reference::model
                    : ref == "precomputed" ? PreferenceSpec::Reference::precomputed
                                           : PreferenceSpec::Reference::none;
      if (t.mode == TrainMode::dpo && p.reference == PreferenceSpec::Reference::none)
        issues.push_back({r.at("reference"), "\"none\"",
                          "must be \"model\" or \"precomputed\" in mode \"dpo\": its loss compares the policy's log-probs with the reference's",
                          "use mode \"simpo\" or \"orpo\" for a reference-free objective"});
      if (t.mode != TrainMode::dpo && p.reference != PreferenceSpec::Reference::none)
        issues.push_back({r.at("reference"), brief((*v)["reference"]),
                          "must be \"none\" in mode \"" + mode + "\": its objective has no reference model", {}});
    }
    r.finish();
  }
  if (pairs_given && t.global_batch != 2 * p.pairs_per_step)
    issues.push_back({ptr + "/pairs_per_step", std::to_string(p.pairs_per_step),
                      "must be half of training.global_batch (" + std::to_string(t.global_batch) +
                          " sequences: a chosen and a rejected sequence per pair)",
                      {}});
  else if (!pairs_given && t.global_batch % 2 != 0)
    issues.push_back({"/training/global_batch", std::to_string(t.global_batch),
                      "must be even in mode \"" + mode + "\": each pair is a chosen and a rejected sequence", {}});
  p.pairs_per_step = t.global_batch / 2;
  out = p;
}

/// The `distill` block of a distill case (SCHEMA.md, "Post-training cases").
void read_distill(const json& v, const std::string& ptr, const TrainingPlan& t, bool dp_stated,
                  std::optional<DistillSpec>& out, int64_t num_gpus, std::vector<Issue>& issues) {
  if (!v.is_object()) {
    issues.push_back({ptr, brief(v), "must be an object", {}});
    return;
  }
  ObjectReader r(v, ptr, issues);
  DistillSpec d;
  bool teacher_ok = false;
  if (const json* te = r.get("teacher")) {
    try {
      d.teacher = te->is_string() ? load_model(te->get<std::string>(), r.at("teacher")) : model_from_hf_config(*te, r.at("teacher"), "teacher");
      teacher_ok = true;
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  } else {
    issues.push_back({r.at("teacher"), "", "is required (an HF config object or a model preset)", {}});
  }
  std::string placement;
  // "auto": the teacher on the student's GPUs, scoring the case's own sequences, as the
  // open recipes run it (torchtune recipes/knowledge_distillation_distributed.py at
  // 05516bb: KDRecipeDistributed shards teacher and student with FSDP over the same
  // ranks and runs the teacher's forward on each batch).
  if (r.left_auto("placement")) {
    placement = "colocated";
    d.auto_keys.emplace_back("placement");
  } else if (r.choice("placement", placement, {"colocated", "split", "precomputed"}, true)) {
    d.placement = placement == "split"         ? DistillSpec::Placement::split
                  : placement == "precomputed" ? DistillSpec::Placement::precomputed
                                               : DistillSpec::Placement::colocated;
  }
  const bool split = placement == "split";
  // "auto" under split: the GPUs the student's stated layout leaves.
  bool has_gpus = false;
  if (r.left_auto("teacher_gpus")) {
    d.auto_keys.emplace_back("teacher_gpus");
    if (split) {
      const int64_t student = t.tp * t.pp * t.cp * t.dp;
      if (!dp_stated || (t.auto_layout & (kAutoTp | kAutoPp | kAutoCp)) || student >= num_gpus)
        issues.push_back({r.at("teacher_gpus"), "\"auto\"",
                          "needs the student's layout stated (tp, pp, cp, dp) with GPUs left over for the teacher",
                          "state teacher_gpus"});
      else d.teacher_gpus = num_gpus - student;
    }
  } else {
    has_gpus = r.integer("teacher_gpus", d.teacher_gpus, split);
  }
  if (has_gpus && !split && !placement.empty())
    issues.push_back({r.at("teacher_gpus"), std::to_string(d.teacher_gpus), "is read only when placement is \"split\"", {}});
  if (has_gpus && split && d.teacher_gpus >= num_gpus)
    issues.push_back({r.at("teacher_gpus"), std::to_string(d.teacher_gpus),
                      "must be less than num_gpus (" + std::to_string(num_gpus) + "): the student needs GPUs of its own", {}});
  else if (has_gpus && split && t.tp * t.pp * t.cp > 0 && d.teacher_gpus % (t.tp * t.pp * t.cp) != 0)
    issues.push_back({r.at("teacher_gpus"), std::to_string(d.teacher_gpus),
                      "must be a multiple of tp*pp*cp = " + std::to_string(t.tp * t.pp * t.cp) +
                          " (the teacher runs with the student's tp, pp and cp)",
                      {}});
  bool online = false;
  const bool online_auto = r.left_auto("online");
  if (online_auto) d.auto_keys.emplace_back("online");
  if (!online_auto && r.boolean("online", online) && online)
    issues.push_back({r.at("online"), "true",
                      "is not simulated: the student's own generations (on-policy distillation) need a rollout",
                      "set online to false"});
  r.finish();
  // The teacher runs on the student's layout (colocated) or its tp and pp (split).
  if (teacher_ok && !placement.empty() && placement != "precomputed" && t.tp >= 1 && t.pp >= 1) {
    if (d.teacher.heads % t.tp != 0)
      issues.push_back({r.at("teacher"), d.teacher.name,
                        "the teacher's attention heads (" + std::to_string(d.teacher.heads) + ") must be divisible by tp (" +
                            std::to_string(t.tp) + "): it runs with the student's tensor parallelism",
                        {}});
    const int64_t stages = t.pp * t.vpp.value_or(1);
    if (d.teacher.layers < stages)
      issues.push_back({r.at("teacher"), d.teacher.name,
                        "the teacher's " + std::to_string(d.teacher.layers) + " layers must be at least the pipeline stages pp*vpp = " +
                            std::to_string(stages),
                        {}});
  }
  out = d;
}

/// The `offload` block (SCHEMA.md, "Post-training cases"): where the optimizer states,
/// parameters, gradients and activations live. The optimizer on the CPU (ZeRO-Offload) is
/// simulated; the other placements are refused by name.
void read_offload(const json& v, const std::string& ptr, TrainingPlan& t, std::vector<Issue>& issues) {
  // "auto", the block's or a key's: nothing offloaded, the fastest setting (SCHEMA.md).
  if (v.is_string() && v == "auto") return;
  if (!v.is_object()) {
    issues.push_back({ptr, brief(v), "must be an object or \"auto\"", {}});
    return;
  }
  ObjectReader r(v, ptr, issues);
  const std::string rule = "is not simulated: only the optimizer offloads, to \"cpu\" (ZeRO-Offload)";
  std::string where;
  if (r.choice("optimizer", where, {"none", "cpu", "nvme"}, false, true)) {
    if (where == "nvme") issues.push_back({r.at("optimizer"), "\"nvme\"", rule, "use \"cpu\" or \"none\""});
    t.memory.offload_optimizer = t.memory.offload_optimizer || where == "cpu";
  }
  for (const char* key : {"params", "gradients"}) {
    where.clear();
    if (r.choice(key, where, {"none", "cpu", "nvme"}, false, true) && where != "none" && where != "auto")
      issues.push_back({r.at(key), "\"" + where + "\"", rule, "use \"none\""});
  }
  where.clear();
  if (r.choice("activations", where, {"none", "cpu"}, false, true) && where != "none" && where != "auto")
    issues.push_back({r.at("activations"), "\"" + where + "\"", rule, "use \"none\""});
  r.finish();
}

void read_training(ObjectReader& r, TrainingPlan& t, Scenario& sc, int64_t num_gpus, EngineKeys engine_keys,
                   std::vector<Issue>& issues) {
  std::optional<RlSpec>& rl_out = sc.rl;
  // "auto" where the source did not publish a layout field (SCHEMA.md): the field keeps its
  // default and its bit in auto_layout; evaluate_training resolves it.
  bool has_dp = false;
  for (const auto& [key, field, bit] : {std::tuple<const char*, int64_t*, unsigned>{"tp", &t.tp, kAutoTp},
                                        {"pp", &t.pp, kAutoPp},
                                        {"cp", &t.cp, kAutoCp},
                                        {"ep", &t.ep, kAutoEp},
                                        {"dp", &t.dp, kAutoDp}}) {
    std::optional<int64_t> v;
    if (!r.integer_or_auto(key, v)) continue;
    if (v) *field = *v;
    else t.auto_layout |= bit;
    if (bit == kAutoDp) has_dp = true;
  }
  r.integer_or_auto("vpp", t.vpp);
  r.integer_or_auto("etp", t.etp);
  if (const json* v = r.get("sp"); v && v->is_string() && *v == "auto") {
    r.allow("sp");
    t.auto_layout |= kAutoSp;
  } else if (v && !v->is_boolean()) {
    r.allow("sp");
    issues.push_back({r.at("sp"), brief(*v), "must be true, false or \"auto\"", {}});
  } else {
    r.boolean("sp", t.sp);
  }
  std::optional<int64_t> zero = 0;
  if (r.integer_or_auto("zero", zero, 0)) {
    if (zero && *zero > 3) issues.push_back({r.at("zero"), std::to_string(*zero), "must be 0, 1, 2, 3 or \"auto\"", {}});
    else t.zero = zero ? std::optional<int>(static_cast<int>(*zero)) : std::nullopt;
  }
  std::optional<int64_t> mb;
  if (r.has("micro_batch")) {
    if (r.integer_or_auto("micro_batch", mb)) t.micro_batch = mb;
  } else {
    r.allow("micro_batch");
    t.micro_batch = std::nullopt;  // absent: auto, reported under resolved
  }
  r.integer("global_batch", t.global_batch, true);
  r.integer("seq_len", t.seq_len, true);
  if (int64_t doc = 0; r.integer("document_tokens", doc)) t.document_tokens = doc;
  std::string s;
  if (r.choice("recompute", s, {"none", "selective", "full"}, false, true)) {
    t.recompute = s == "auto"        ? std::optional<Recompute>()
                  : s == "none"      ? std::optional<Recompute>(Recompute::none)
                  : s == "selective" ? std::optional<Recompute>(Recompute::selective)
                                     : std::optional<Recompute>(Recompute::full);
  }
  if (const json* rm = r.get("recompute_modules")) {
    static const std::vector<std::string> names = {"core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp"};
    if (!rm->is_array()) {
      issues.push_back({r.at("recompute_modules"), brief(*rm), "must be an array of module names", {}});
    } else {
      t.recompute_modules = 0;
      for (size_t i = 0; i < rm->size(); ++i) {
        const json& v = (*rm)[i];
        const std::string name = v.is_string() ? v.get<std::string>() : "";
        const auto it = std::find(names.begin(), names.end(), name);
        if (it == names.end()) {
          const std::string n = nearest(name, names);
          issues.push_back({r.at("recompute_modules") + "/" + std::to_string(i), brief(v),
                            "must be one of core_attn, layernorm, mla_up_proj, moe_act, mlp",
                            n.empty() ? "" : "did you mean \"" + n + "\"?"});
        } else {
          t.recompute_modules |= 1u << static_cast<unsigned>(it - names.begin());
        }
      }
    }
  }
  if (r.choice("framework", s, {"megatron", "pytorch"}, false, true))
    t.framework = s == "auto"       ? std::optional<Framework>()
                  : s == "megatron" ? std::optional<Framework>(Framework::megatron)
                                    : std::optional<Framework>(Framework::pytorch);
  if (r.choice("elementwise", s, {"fused", "eager"})) t.eager_elementwise = s == "eager";
  if (r.number("recompute_fraction", t.recompute_fraction, false, 0.0) &&
      (t.recompute_fraction <= 0.0 || t.recompute_fraction > 1.0))
    issues.push_back({r.at("recompute_fraction"), std::to_string(t.recompute_fraction), "must be in (0, 1]", {}});
  if (r.choice("precision", s, {"fp16", "bf16", "fp8"}, false, true)) {
    t.precision_auto = s == "auto";
    if (!t.precision_auto) parse_dtype(s, t.precision);
  }
  if (r.choice("grad_reduce_dtype", s, {"fp32", "bf16", "fp16"}, false, true)) {
    // The 16-bit choice is the training dtype's: bf16 under bf16 and fp8, fp16 under fp16.
    const std::string half = t.precision == DType::fp16 ? "fp16" : "bf16";
    if (s == "auto") t.grad_reduce_fp32.reset();
    else if (s == "fp32" || s == half) t.grad_reduce_fp32 = s == "fp32";
    else
      issues.push_back({r.at("grad_reduce_dtype"), "\"" + s + "\"",
                        "must be \"fp32\" or \"" + half + "\" with precision \"" + std::string(to_string(t.precision)) + "\"",
                        {}});
  }
  if (r.choice("schedule", s, {"1f1b", "gpipe", "zb-h1", "dualpipe"}, false, true)) {
    t.schedule_auto = s == "auto";
    t.schedule = s == "gpipe"      ? Schedule::gpipe
                 : s == "zb-h1"    ? Schedule::zb_h1
                 : s == "dualpipe" ? Schedule::dualpipe
                                   : Schedule::one_f_one_b;
  }
  if (r.choice("attention", s, {"fused", "cudnn", "flash2", "flash1", "flash-triton", "unfused"}, false, true))
    t.attention = s == "auto"     ? std::optional<AttentionKernel>()
                  : s == "flash2" ? std::optional<AttentionKernel>(AttentionKernel::flash2)
                  : s == "flash1" ? std::optional<AttentionKernel>(AttentionKernel::flash1)
                  : s == "flash-triton" ? std::optional<AttentionKernel>(AttentionKernel::flash_triton)
                  : s == "cudnn"  ? std::optional<AttentionKernel>(AttentionKernel::cudnn)
                  : s == "unfused" ? std::optional<AttentionKernel>(AttentionKernel::unfused)
                                   : std::optional<AttentionKernel>(AttentionKernel::fused);
  // "auto": AdamW, the schema's default (SCHEMA.md, "training"), reported under resolved.
  if (r.choice("optimizer", s, {"adamw", "adam", "sgd", "adafactor", "lion", "adam8bit"}, false, true)) {
    t.optimizer_auto = s == "auto";
    t.optimizer = s == "sgd"         ? Optimizer::sgd
                  : s == "adafactor" ? Optimizer::adafactor
                  : s == "lion"      ? Optimizer::lion
                  : s == "adam8bit"  ? Optimizer::adam8bit
                                     : Optimizer::adamw;
  }
  if (r.choice("fp8_recipe", s, {"tensorwise", "blockwise"}, false, true))
    t.fp8_blockwise = s == "auto" ? std::optional<bool>() : std::optional<bool>(s == "blockwise");
  if (r.choice("optimizer_moments", s, {"fp32", "bf16"}, false, true)) {
    t.bf16_moments = s == "bf16";
    t.moments_auto = s == "auto";
  }
  if (t.fp8_blockwise && t.precision != DType::fp8)
    issues.push_back({r.at("fp8_recipe"), *t.fp8_blockwise ? "\"blockwise\"" : "\"tensorwise\"",
                      "applies only to precision \"fp8\"", "remove it or set training.precision to \"fp8\""});
  if (r.choice("mode", s, {"pretrain", "sft", "lora", "qlora", "ppo", "grpo", "dpo", "simpo", "orpo", "distill"}))
    t.mode = s == "sft"       ? TrainMode::sft
             : s == "lora"    ? TrainMode::lora
             : s == "qlora"   ? TrainMode::qlora
             : s == "ppo"     ? TrainMode::ppo
             : s == "grpo"    ? TrainMode::grpo
             : s == "dpo"     ? TrainMode::dpo
             : s == "simpo"   ? TrainMode::simpo
             : s == "orpo"    ? TrainMode::orpo
             : s == "distill" ? TrainMode::distill
                              : TrainMode::pretrain;
  if (r.left_auto("fp8_param_gather")) {
    t.fp8_param_gather.reset();
  } else if (bool b = false; r.boolean("fp8_param_gather", b)) {
    t.fp8_param_gather = b;
    // FP8 weights belong to full-parameter FP8 training on the Megatron stack.
    if (b && (t.precision != DType::fp8 || trains_adapters(t.mode) || framework_of(t) == Framework::pytorch ||
              t.fp8_blockwise.value_or(false)))
      issues.push_back({r.at("fp8_param_gather"), "true",
                        "applies only to per-tensor FP8 (precision \"fp8\") full-parameter training on the Megatron stack",
                        "remove it or set it to false"});
  }
  if (r.choice("loss", s, {"eager", "compiled"}, false, true)) {
    t.compiled_loss = s == "auto" ? std::optional<bool>() : std::optional<bool>(s == "compiled");
    // Where the framework is left to an auto ZeRO stage, the search may still pick the
    // PyTorch stack; the report's layout.loss says which loss ran.
    if (t.compiled_loss && framework_of(t) != Framework::pytorch && (t.framework || t.zero))
      issues.push_back({r.at("loss"), "\"" + s + "\"",
                        "applies to the PyTorch stack (framework \"pytorch\"); the Megatron stack runs its fused vocabulary-parallel cross entropy",
                        "remove it or set framework to \"pytorch\""});
  }
  if (r.choice("moe_dispatcher", s, {"alltoall", "hierarchical"}, false, true))
    t.moe_dispatcher = s == "auto"       ? std::optional<MoeDispatcher>()
                       : s == "alltoall" ? std::optional<MoeDispatcher>(MoeDispatcher::alltoall)
                                         : std::optional<MoeDispatcher>(MoeDispatcher::hierarchical);
  if (r.left_auto("ep_overlap")) {
    t.ep_overlap.reset();
  } else if (bool b = false; r.boolean("ep_overlap", b)) {
    t.ep_overlap = b;
    if (const std::string why = ep_overlap_blocker(t); b && !why.empty())
      issues.push_back({r.at("ep_overlap"), "true", "Megatron-Core's batch-level expert-parallel overlap " + why,
                        "remove it or set it to false"});
  }
  if (is_preference(t.mode)) read_preference(r.get("preference"), r.at("preference"), t, sc.preference, issues);
  else if (r.get("preference"))
    issues.push_back({r.at("preference"), "", "is read only when mode is \"dpo\", \"simpo\" or \"orpo\"", {}});
  if (t.mode == TrainMode::distill) {
    if (const json* d = r.get("distill")) read_distill(*d, r.at("distill"), t, has_dp && !(t.auto_layout & kAutoDp), sc.distill, num_gpus, issues);
    else issues.push_back({r.at("distill"), "", "is required when mode is \"distill\" (teacher, placement)", {}});
  } else if (r.get("distill")) {
    issues.push_back({r.at("distill"), "", "is read only when mode is \"distill\"", {}});
  }
  if (t.mode == TrainMode::ppo || t.mode == TrainMode::grpo) {
    if (const json* rl = r.get("rl"))
      read_rl(*rl, r.at("rl"), t, has_dp && !(t.auto_layout & kAutoDp), sc, rl_out, num_gpus, engine_keys, issues);
    else issues.push_back({r.at("rl"), "", "is required when mode is \"" + s + "\" (samples, lengths, placement, GPUs)", {}});
  } else if (r.get("rl")) {
    issues.push_back({r.at("rl"), "", "is read only when mode is \"ppo\" or \"grpo\"", {}});
  }
  const json* l = r.get("lora");
  if (l && l->is_string() && *l == "auto") {
    // Nothing published about the adapters: the framework's defaults (lora_defaults), the
    // base stored as the mode says (as each key "auto", below).
    LoraSpec spec;
    spec.rank = std::nullopt;
    spec.targets = std::nullopt;
    if (t.mode == TrainMode::qlora) spec.base_bytes_per_param = kNf4BytesPerParam;
    t.lora = spec;
  } else if (l && !l->is_object()) {
    issues.push_back({r.at("lora"), brief(*l), "must be an object or \"auto\"", {}});
  } else if (l) {
    ObjectReader lr(*l, r.at("lora"), issues);
    LoraSpec spec;
    // "auto": the framework's default (lora_defaults), reported under resolved.
    if (!lr.has("rank")) issues.push_back({lr.at("rank"), "", "is required (an integer or \"auto\")", {}});
    else lr.integer_or_auto("rank", spec.rank);
    // The scaling alpha does not change a step's cost.
    double alpha = 0;
    if (!lr.left_auto("alpha")) lr.number("alpha", alpha, false, 0);
    // Absent or "auto", the base is stored as the mode says: QLoRA's 4-bit NormalFloat
    // (Dettmers et al. 2023), else the training precision's 16 bits.
    std::string base;
    lr.choice("base_dtype", base, {"bf16", "fp16", "nf4", "int8", "fp8"}, false, true);
    if ((base.empty() || base == "auto") && t.mode == TrainMode::qlora) base = "nf4";
    // Absent or "auto": off, bitsandbytes' default (BitsAndBytesConfig
    // bnb_4bit_use_double_quant=False).
    bool dq = false;
    if (!lr.left_auto("double_quant")) lr.boolean("double_quant", dq);
    // Dropout on the adapters' input: a probability, or "auto" (the framework's default).
    if (const json* dp = lr.get("dropout")) {
      if (dp->is_string() && *dp == "auto") spec.dropout = std::nullopt;
      else if (!dp->is_number() || dp->get<double>() < 0.0 || dp->get<double>() >= 1.0)
        issues.push_back({lr.at("dropout"), brief(*dp), "must be a probability in [0, 1) or \"auto\"", {}});
      else spec.dropout = dp->get<double>();
    }
    // Storage of the frozen base's linear weights: NF4 (kNf4BytesPerParam), int8/fp8 one
    // byte per weight (per-row scales are negligible).
    if (base == "nf4") spec.base_bytes_per_param = dq ? kNf4DoubleQuantBytesPerParam : kNf4BytesPerParam;
    else if (base == "int8" || base == "fp8") spec.base_bytes_per_param = 1.0;
    if (const json* tg = lr.get("targets")) {
      const std::vector<std::string> valid = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
      if (tg->is_string() && *tg == "auto") {
        spec.targets = std::nullopt;
      } else if (!tg->is_array()) {
        issues.push_back({lr.at("targets"), brief(*tg), "must be an array of module names or \"auto\"", {}});
      } else {
        for (size_t i = 0; i < tg->size(); ++i) {
          const json& v = (*tg)[i];
          const std::string name = v.is_string() ? v.get<std::string>() : "";
          if (std::find(valid.begin(), valid.end(), name) == valid.end()) {
            const std::string n = nearest(name, valid);
            issues.push_back({lr.at("targets") + "/" + std::to_string(i), brief(v),
                              "must be one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj",
                              n.empty() ? "" : "did you mean \"" + n + "\"?"});
          } else {
            spec.targets->push_back(name);
          }
        }
      }
    }
    lr.finish();
    t.lora = spec;
  }
  if (trains_adapters(t.mode) && !t.lora && !l)
    issues.push_back({r.pointer() + "/lora", "", "is required when mode is \"" + std::string(to_string(t.mode)) + "\" (rank and targets)", {}});
  if (const json* sl = r.get("stage_layers")) {
    if (!sl->is_array()) {
      issues.push_back({r.at("stage_layers"), brief(*sl), "must be an array of positive integers", {}});
    } else {
      for (size_t i = 0; i < sl->size(); ++i) {
        const json& v = (*sl)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 1)
          issues.push_back({r.at("stage_layers") + "/" + std::to_string(i), brief(v), "must be a positive integer", {}});
        else
          t.stage_layers.push_back(v.get<int64_t>());
      }
    }
  }
  r.boolean("offload_optimizer", t.memory.offload_optimizer);
  if (const json* o = r.get("offload")) read_offload(*o, r.at("offload"), t, issues);
  double mib = 0;
  if (r.number("cuda_context_mib", mib, false, 0)) t.memory.cuda_context_bytes = mib * 1024.0 * 1024.0;
  r.number("allocator_reserve_fraction", t.memory.allocator_reserve_fraction, false, 0);
  // A share in [0, 1], or "auto" (the default): userbuffers' overlap where the Megatron
  // stack runs it (userbuffers_tp_overlap).
  if (const json* o = r.get("tp_comm_overlap"); o && !(o->is_string() && *o == "auto")) {
    double f = 0;
    if (o->is_string()) {
      issues.push_back({r.at("tp_comm_overlap"), o->dump(), "must be a number in [0, 1] or \"auto\"", {}});
    } else if (r.number("tp_comm_overlap", f, false, 0.0)) {
      if (f > 1.0)
        issues.push_back({r.at("tp_comm_overlap"), std::to_string(f), "must be in [0, 1]", {}});
      else
        t.tp_comm_overlap = f;
    }
  }
  r.number("moe_imbalance", t.moe_imbalance, false, 1.0);
  r.boolean("overlap_dp", t.overlap_dp);
  r.number("train_tokens", t.budget.tokens, false, 0);
  r.number("usd_per_gpu_hour", t.budget.usd_per_gpu_hour, false, 0);
  r.number("pue", t.budget.pue, false, 1.0);
  r.fraction_or_auto("effective_training_fraction", t.budget.effective_fraction);
  r.finish();
  // Absent dp: the GPUs the plan covers (under split distillation, those the teacher leaves).
  int64_t plan_gpus = num_gpus;
  if (sc.distill && sc.distill->placement == DistillSpec::Placement::split && sc.distill->teacher_gpus < num_gpus)
    plan_gpus -= sc.distill->teacher_gpus;
  // Split RL: those of the training pool; a pool still to choose leaves dp to resolve.
  if (sc.rl && sc.rl->placement == RlSpec::Placement::split && !sc.rl->pools_auto) plan_gpus = sc.rl->train_gpus;
  // With tp, pp or cp auto, so is dp.
  if (!has_dp && ((t.auto_layout & (kAutoTp | kAutoPp | kAutoCp)) || (sc.rl && sc.rl->pools_auto)))
    t.auto_layout |= kAutoDp;
  else if (!has_dp && t.tp * t.pp * t.cp > 0 && plan_gpus % (t.tp * t.pp * t.cp) == 0) t.dp = plan_gpus / (t.tp * t.pp * t.cp);
}

void read_length(const json& v, const std::string& ptr, LengthDist& d, std::vector<Issue>& issues) {
  if (v.is_number()) {
    d.kind = LengthDist::Kind::fixed;
    d.mean = v.get<double>();
    if (d.mean < 1) issues.push_back({ptr, brief(v), "must be >= 1", {}});
    return;
  }
  ObjectReader r(v, ptr, issues);
  if (!v.is_object()) {
    issues.push_back({ptr, brief(v), "must be a number or {\"mean\", \"dist\"[, \"min\", \"max\"]}", {}});
    return;
  }
  r.number("mean", d.mean, true, 1);
  std::string dist = "fixed";
  r.choice("dist", dist, {"fixed", "uniform", "sharegpt"});
  d.kind = dist == "uniform" ? LengthDist::Kind::uniform
           : dist == "sharegpt" ? LengthDist::Kind::sharegpt
                                : LengthDist::Kind::fixed;
  if (d.kind == LengthDist::Kind::uniform) {
    r.number("min", d.min, true, 1);
    r.number("max", d.max, true, 1);
    if (d.min > d.max) issues.push_back({ptr, brief(v), "min must not exceed max", {}});
  } else {
    r.allow("min");
    r.allow("max");
  }
  r.finish();
}

bool has_issue_at(const std::vector<Issue>& issues, std::string_view pointer);

/// The prompt-attention class an engine's attention_backend names, where the name alone says
/// it: FlashAttention-3 ("fa3"), or FlashAttention-2-class code ("fa2"; xFormers, which
/// dispatches to FlashAttention-2; the engines' Triton kernels). Names that cover both
/// generations (vLLM's "flash_attn", "flashinfer") or decode kernels ("flashmla") leave the
/// release's own (EngineDefaults::prefill_attention_fa2).
std::optional<bool> prompt_attention_fa2(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name == "fa3" || name == "flashattention3" || name == "flash_attn_3" || name == "flashattention-3") return false;
  if (name == "fa2" || name == "flashattention2" || name == "flash_attn_2" || name == "flashattention-2" ||
      name == "xformers" || name == "triton")
    return true;
  return std::nullopt;
}

void read_inference(ObjectReader& r, InferencePlan& p, std::vector<Issue>& issues, const fs::path& base_dir,
                    EngineKeys engine_keys) {
  r.boolean("sparse_24", p.sparse_24);
  std::string scaling;
  if (r.choice("fp8_scaling", scaling, {"tensor", "block", "auto"}) && scaling != "auto")
    p.fp8_block_scaling = scaling == "block";
  std::string router;
  if (r.choice("router", router, {"round_robin", "least_outstanding"}))
    p.router = router == "least_outstanding" ? InferencePlan::Router::least_outstanding : InferencePlan::Router::round_robin;
  if (const json* o = r.get("slo")) {
    if (!o->is_object()) {
      issues.push_back({r.at("slo"), brief(*o), "must be an object", {}});
    } else {
      ObjectReader sr(*o, r.at("slo"), issues);
      sr.number("ttft_ms", p.slo_ttft_ms, false, 0);
      sr.number("tpot_ms", p.slo_tpot_ms, false, 0);
      sr.finish();
    }
  }
  if (const json* d = r.get("disaggregation")) {
    if (!d->is_object()) {
      issues.push_back({r.at("disaggregation"), brief(*d), "must be an object", {}});
    } else {
      ObjectReader dr(*d, r.at("disaggregation"), issues);
      dr.integer("prefill_replicas", p.prefill_replicas, true);
      dr.integer("decode_replicas", p.decode_replicas, true);
      std::string link;
      if (dr.choice("kv_transfer", link, {"nvlink", "network"})) p.kv_transfer_over_network = link == "network";
      dr.finish();
    }
  }
  for (auto [key, field, flag] : {std::tuple<const char*, int64_t*, bool*>{"tp", &p.tp, &p.tp_auto}, {"pp", &p.pp, &p.pp_auto}}) {
    std::optional<int64_t> v;
    if (!r.integer_or_auto(key, v)) continue;
    if (v) *field = *v;
    else *flag = true;
  }
  r.integer_or_auto("ep", p.ep);
  if (const json* adp = r.get("attention_dp")) {
    if (adp->is_boolean()) p.attention_dp = adp->get<bool>();
    else if (!(adp->is_string() && adp->get<std::string>() == "auto"))
      issues.push_back({r.at("attention_dp"), brief(*adp), "must be true, false or \"auto\"", {}});
  }
  if (const json* v = r.get("replicas"); v && v->is_string() && *v == "auto") {
    r.allow("replicas");
    p.replicas_auto = true;  // sized to the GPUs once the system is read
  } else {
    r.integer("replicas", p.replicas);
  }
  std::string s;
  if (r.choice("weight_dtype", s, kDtypes, false, true)) {
    p.weight_dtype_auto = s == "auto";
    if (!p.weight_dtype_auto) parse_dtype(s, p.weight_dtype);
  }
  if (r.choice("activation_dtype", s, kDtypes, false, true)) {
    p.activation_dtype_auto = s == "auto";
    if (!p.activation_dtype_auto) parse_dtype(s, p.activation_dtype);
  }
  if (r.choice("kv_dtype", s, kDtypes, false, true)) {
    if (s == "auto") p.kv_dtype = std::nullopt;
    else {
      DType d{};
      parse_dtype(s, d);
      p.kv_dtype = d;
    }
  }
  const json* ej = r.get("engine");
  std::string engine_name, engine_version, backend;
  if (ej && !ej->is_object()) {
    issues.push_back({r.at("engine"), brief(*ej), "must be an object", {}});
  } else if (ej) {
    ObjectReader er(*ej, r.at("engine"), issues);
    // The engine and its release select the profile (data/engines/); an attention kernel
    // family the source names sets the class of the prompts' kernel where the name says it
    // (prompt_attention_fa2).
    // "auto" (the source names no engine): as absent, the newest vLLM profile, and the
    // report's engine.profile.match says so.
    if (!er.left_auto("name")) er.string("name", engine_name);
    er.string("version", engine_version);
    er.string("attention_backend", backend);
    auto opt_int = [&](const char* key, std::optional<int64_t>& out) {
      std::optional<int64_t> v;
      if (er.integer_or_auto(key, v)) out = v;
    };
    opt_int("max_num_seqs", p.engine.max_num_seqs);
    p.engine.max_num_seqs_auto = er.has("max_num_seqs") && (*ej)["max_num_seqs"].is_string() && (*ej)["max_num_seqs"] == "auto";
    opt_int("max_num_batched_tokens", p.engine.max_num_batched_tokens);
    opt_int("block_size", p.engine.block_size);
    opt_int("kv_cache_tokens", p.engine.kv_cache_tokens);
    opt_int("cuda_graph_max_tokens", p.engine.cuda_graph_max_tokens);
    opt_int("scheduler_steps", p.engine.scheduler_steps);
    opt_int("max_model_len", p.engine.max_model_len);
    bool graphs = false;
    if (!er.left_auto("cuda_graphs") && er.boolean("cuda_graphs", graphs))  // auto: the profile's
      p.engine.cuda_graphs = graphs;
    double overhead = 0;
    if (er.number("step_overhead_ms", overhead, false, 0)) p.engine.step_overhead_ms = overhead;
    double eager_host = 0;
    if (er.number("eager_host_us_per_layer", eager_host, false, 0)) p.engine.eager_host_us_per_layer = eager_host;
    std::string mode;
    if (er.choice("preemption", mode, {"recompute", "swap", "partial", "cached"}))
      p.engine.preemption = preemption_from_string(mode).value_or(Preemption::recompute);
    double swap_gib = 0;
    if (er.number("swap_space_gib", swap_gib, false, 0)) p.engine.swap_space_gib = swap_gib;
    if (bool b = false; !er.left_auto("chunked_prefill") && er.boolean("chunked_prefill", b)) p.engine.chunked_prefill = b;
    if (double u = 0; !er.left_auto("gpu_memory_utilization") && er.number("gpu_memory_utilization", u, false, 0))
      p.engine.gpu_memory_utilization = u;
    // Validation cases follow SCHEMA.md: a reader ignores an engine key it does not know.
    // Scenarios are our own files: an unknown key is a typo, reported with a hint.
    if (engine_keys == EngineKeys::ignore_unknown)
      for (auto it = ej->begin(); it != ej->end(); ++it) er.allow(it.key());
    er.finish();
  }
  if (!engine_name.empty() || !ej || !has_issue_at(issues, r.at("engine") + "/name")) {
    try {
      p.profile = select_engine_profile(engine_name, engine_version, r.at("engine"));
      if (const std::optional<bool> fa2 = prompt_attention_fa2(backend)) p.profile.knobs.prefill_attention_fa2 = *fa2;
    } catch (const InputError& err) {
      issues.insert(issues.end(), err.issues().begin(), err.issues().end());
    }
  }
  if (const json* sp = r.get("speculative")) {
    if (!sp->is_object()) {
      issues.push_back({r.at("speculative"), brief(*sp), "must be an object", {}});
    } else {
      ObjectReader sr(*sp, r.at("speculative"), issues);
      sr.integer("k", p.speculative.k, true, 1);
      if (sr.number("acceptance", p.speculative.acceptance, true, 0.0) && p.speculative.acceptance >= 1.0)
        issues.push_back({sr.at("acceptance"), std::to_string(p.speculative.acceptance), "must be in [0, 1)", {}});
      sr.number("draft_cost_fraction", p.speculative.draft_cost_fraction, false, 0.0);
      std::string draft;
      if (sr.string("draft_model", draft)) {
        try {
          p.speculative.draft_model = load_model(draft, sr.at("draft_model"));
        } catch (const InputError& e) {
          issues.insert(issues.end(), e.issues().begin(), e.issues().end());
        }
      }
      if (!p.speculative.draft_model && p.speculative.draft_cost_fraction <= 0)
        issues.push_back({sr.pointer(), "", "needs draft_model or draft_cost_fraction > 0", {}});
      sr.finish();
    }
  }
  if (p.speculative.k > 0 && p.engine.scheduler_steps.value_or(1) > 1)
    issues.push_back({r.at("engine") + "/scheduler_steps", std::to_string(*p.engine.scheduler_steps),
                      "cannot be combined with speculative decoding (vLLM's multi-step scheduler does not verify drafts)",
                      {}});
  const json* w = r.get("workload");
  if (w && !w->is_object()) {
    issues.push_back({r.at("workload"), brief(*w), "must be an object", {}});
  } else if (w) {
    ObjectReader wr(*w, r.at("workload"), issues);
    std::string mode;
    if (wr.choice("mode", mode, {"offline", "poisson", "concurrency", "trace"}, true)) {
      p.workload.mode = mode == "poisson"       ? ServingWorkload::Mode::poisson
                        : mode == "concurrency" ? ServingWorkload::Mode::concurrency
                        : mode == "trace"       ? ServingWorkload::Mode::trace
                                                : ServingWorkload::Mode::offline;
    }
    wr.number("qps", p.workload.qps, mode == "poisson", 0);
    wr.integer("concurrency", p.workload.concurrency, mode == "concurrency");
    if (mode == "trace") {
      std::string file;
      if (wr.string("trace_file", file, true)) {
        fs::path path(file);
        if (path.is_relative() && !base_dir.empty()) path = base_dir / path;
        try {
          p.workload.trace = read_request_trace(path, wr.at("trace_file"));
          p.workload.num_requests = static_cast<int64_t>(p.workload.trace.size());
        } catch (const InputError& e) {
          issues.insert(issues.end(), e.issues().begin(), e.issues().end());
        }
      }
      wr.allow("num_requests");
      wr.allow("input_tokens");
      wr.allow("output_tokens");
    } else {
      wr.allow("trace_file");
      if (wr.left_auto("num_requests")) {
        p.workload.num_requests = kBenchmarkDefaultPrompts;
        p.workload.num_requests_auto = true;
      } else {
        wr.integer("num_requests", p.workload.num_requests, true);
      }
      if (const json* in = wr.get("input_tokens")) read_length(*in, wr.at("input_tokens"), p.workload.input_tokens, issues);
      else issues.push_back({wr.at("input_tokens"), "", "is required", {}});
      if (const json* out = wr.get("output_tokens"))
        read_length(*out, wr.at("output_tokens"), p.workload.output_tokens, issues);
      else issues.push_back({wr.at("output_tokens"), "", "is required", {}});
    }
    if (wr.number("prefix_hit_rate", p.workload.prefix_hit_rate, false, 0.0) && p.workload.prefix_hit_rate >= 1.0)
      issues.push_back({wr.at("prefix_hit_rate"), std::to_string(p.workload.prefix_hit_rate), "must be in [0, 1)", {}});
    wr.finish();
  } else {
    issues.push_back({r.at("workload"), "", "is required", {}});
  }
  r.finish();
}

bool has_issue_at(const std::vector<Issue>& issues, std::string_view pointer) {
  return std::any_of(issues.begin(), issues.end(), [&](const Issue& i) { return i.pointer == pointer; });
}

/// Whether a key that check_training_layout / check_inference_layout read has an issue.
bool layout_input_rejected(const std::vector<Issue>& issues) {
  static const std::vector<std::string_view> inputs = {
      "/system", "/system/num_gpus", "/system/gpus_per_node", "/training", "/training/tp", "/training/pp",
      "/training/dp", "/training/cp", "/training/ep", "/training/vpp", "/training/etp", "/training/sp",
      "/training/zero", "/training/micro_batch", "/training/global_batch", "/training/seq_len",
      "/training/precision", "/training/stage_layers", "/inference", "/inference/tp", "/inference/pp",
      "/inference/ep", "/inference/replicas", "/inference/engine/gpu_memory_utilization", "/training/rl",
      "/training/rl/placement", "/training/rl/gpus", "/training/rl/gpus/train"};
  return std::any_of(issues.begin(), issues.end(), [&](const Issue& i) {
    return std::find(inputs.begin(), inputs.end(), i.pointer) != inputs.end() ||
           i.pointer.rfind("/training/stage_layers/", 0) == 0;
  });
}

}  // namespace

std::vector<TraceRequest> read_request_trace(const fs::path& path, const std::string& pointer) {
  const std::string text = read_text_file(path, kMaxDataFileBytes);
  std::vector<TraceRequest> out;
  std::vector<Issue> issues;
  std::istringstream in(text);
  std::string line;
  size_t line_no = 0;
  const bool jsonl = path.extension() == ".jsonl" || path.extension() == ".json";
  std::vector<std::string> header;
  auto where = [&]() { return path.string() + ":" + std::to_string(line_no); };
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    TraceRequest t;
    if (jsonl) {
      json j;
      try {
        j = json::parse(line);
      } catch (const json::parse_error& e) {
        issues.push_back({where(), "", std::string("malformed JSON line: ") + e.what(), {}});
        continue;
      }
      ObjectReader lr(j, where(), issues);
      lr.number("arrival_s", t.arrival_s, true, 0);
      lr.integer("input_tokens", t.input_tokens, true);
      lr.integer("output_tokens", t.output_tokens, true);
      lr.string("prefix_id", t.prefix_id);
      lr.integer("prefix_tokens", t.prefix_tokens, false, 0);
      lr.finish();
    } else {
      std::vector<std::string> cells;
      std::string cell;
      std::istringstream ls(line);
      while (std::getline(ls, cell, ',')) cells.push_back(cell);
      if (header.empty()) {
        header = cells;
        for (const char* need : {"arrival_s", "input_tokens", "output_tokens"})
          if (std::find(header.begin(), header.end(), need) == header.end())
            issues.push_back({path.string() + ":1", line, std::string("the CSV header needs a column ") + need, {}});
        continue;
      }
      for (size_t c = 0; c < header.size() && c < cells.size(); ++c) {
        try {
          if (header[c] == "arrival_s") t.arrival_s = std::stod(cells[c]);
          else if (header[c] == "input_tokens") t.input_tokens = std::stoll(cells[c]);
          else if (header[c] == "output_tokens") t.output_tokens = std::stoll(cells[c]);
          else if (header[c] == "prefix_id") t.prefix_id = cells[c];
          else if (header[c] == "prefix_tokens") t.prefix_tokens = cells[c].empty() ? 0 : std::stoll(cells[c]);
        } catch (const std::exception&) {
          issues.push_back({where() + " column " + header[c], cells[c], "must be a number", {}});
        }
      }
      if (t.input_tokens < 1 || t.output_tokens < 1 || t.arrival_s < 0)
        issues.push_back({where(), line, "input and output tokens must be >= 1 and arrival_s >= 0", {}});
    }
    if (!out.empty() && t.arrival_s < out.back().arrival_s)
      issues.push_back({where(), std::to_string(t.arrival_s), "arrivals must not decrease", {}});
    out.push_back(t);
  }
  if (out.empty() && issues.empty()) issues.push_back({pointer, path.string(), "the trace holds no request", {}});
  if (!issues.empty()) throw InputError(std::move(issues));
  return out;
}

namespace {

/// Why `--set` could not write at `ptr`: the deepest part of the path that exists and holds a
/// value that is not an object (a preset name, a number) has no keys to set below it.
std::string set_failure(const json& doc, const json::json_pointer& ptr, const json::exception& e) {
  std::vector<json::json_pointer> chain;
  for (json::json_pointer p = ptr; !p.empty(); p = p.parent_pointer()) chain.push_back(p);
  std::reverse(chain.begin(), chain.end());
  const json* node = &doc;
  std::string at;
  for (const auto& p : chain) {
    if (!node->is_object()) {
      const std::string where = at.empty() ? "the document" : "\"" + at + "\"";
      return where + " is " + brief(*node) + ", not an object, so " + (node->is_string() ? "a preset's" : "its") +
             " keys cannot be set below it" + (node->is_string() ? "; replace the name with the whole object to change its fields" : "");
    }
    const std::string key = p.back();
    const auto it = node->find(key);
    if (it == node->end()) break;
    at += (at.empty() ? "" : ".") + key;
    node = &*it;
  }
  return std::string("cannot apply: ") + e.what();
}

}  // namespace

void apply_overrides(json& doc, const std::vector<std::string>& sets) {
  std::vector<Issue> issues;
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      issues.push_back({"--set", s, "must look like path=value (e.g. training.tp=4)", {}});
      continue;
    }
    const std::string path = s.substr(0, eq), text = s.substr(eq + 1);
    json value;
    try {
      value = json::parse(text);
    } catch (const json::parse_error&) {
      value = text;
    } catch (const json::out_of_range&) {
      issues.push_back({"--set", s, "number is beyond the range of a double (about 1.8e308)", {}});
      continue;
    }
    try {
      doc[to_pointer(path)] = value;
    } catch (const json::exception& e) {
      issues.push_back({"--set", s, set_failure(doc, to_pointer(path), e), {}});
    }
  }
  if (!issues.empty()) throw InputError(std::move(issues));
}

namespace {

Scenario read_scenario(const json& doc, const fs::path& base_dir, EngineKeys engine_keys, bool cluster_rules) {
  std::vector<Issue> issues;
  Scenario sc;
  if (!doc.is_object()) throw InputError({{"", brief(doc), "a scenario must be a JSON object", {}}});
  ObjectReader top(doc, "", issues);
  top.string("id", sc.id);
  for (const char* k : {"source", "measured", "derivation", "caveats", "description"}) top.allow(k);
  std::string kind;
  const bool has_training = doc.contains("training"), has_inference = doc.contains("inference");
  if (!top.choice("kind", kind, {"training", "inference"})) kind = has_inference && !has_training ? "inference" : "training";

  if (const json* m = top.get("model")) {
    try {
      if (m->is_string()) sc.model = load_model(m->get<std::string>(), "/model", base_dir);
      else sc.model = model_from_hf_config(*m, "/model", sc.id.empty() ? std::string() : sc.id);
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  } else {
    issues.push_back({"/model", "", "is required (a preset name, a config.json path, or a config object)", {}});
  }
  if (const json* s = top.get("system")) {
    ObjectReader r(*s, "/system", issues);
    if (!s->is_object()) issues.push_back({"/system", brief(*s), "must be an object", {}});
    else read_system(r, sc.system, issues);
  } else {
    issues.push_back({"/system", "", "is required", {}});
  }
  if (kind == "training") {
    if (const json* t = top.get("training")) {
      ObjectReader r(*t, "/training", issues);
      TrainingPlan plan;
      if (!t->is_object()) issues.push_back({"/training", brief(*t), "must be an object", {}});
      else read_training(r, plan, sc, sc.system.num_gpus, engine_keys, issues);
      sc.training = plan;
    } else {
      issues.push_back({"/training", "", "is required for kind \"training\"", {}});
    }
    top.allow("inference");
  } else {
    if (const json* p = top.get("inference")) {
      ObjectReader r(*p, "/inference", issues);
      InferencePlan plan;
      if (!p->is_object()) issues.push_back({"/inference", brief(*p), "must be an object", {}});
      else read_inference(r, plan, issues, base_dir, engine_keys);
      // "auto" degrees take what the GPUs leave: one unknown among tp, pp and the replicas
      // follows from the other two (like training's dp); with more than one unknown the
      // layout is not determined by what the source published.
      const int unknowns = (plan.tp_auto ? 1 : 0) + (plan.pp_auto ? 1 : 0) + (plan.replicas_auto ? 1 : 0);
      if (unknowns > 1) {
        std::string which;
        for (auto [name, on] : {std::pair<const char*, bool>{"tp", plan.tp_auto}, {"pp", plan.pp_auto}, {"replicas", plan.replicas_auto}})
          if (on) which += std::string(which.empty() ? "" : ", ") + name;
        issues.push_back({"/inference", which, "at most one of tp, pp and replicas can be \"auto\": the GPUs left over then set it",
                          "state the others as the source ran them"});
      } else if (sc.system.num_gpus >= 1) {
        if (plan.tp_auto && plan.pp >= 1 && plan.replicas >= 1)
          plan.tp = std::max<int64_t>(1, sc.system.num_gpus / plan.pp / plan.replicas);
        if (plan.pp_auto && plan.tp >= 1 && plan.replicas >= 1)
          plan.pp = std::max<int64_t>(1, sc.system.num_gpus / plan.tp / plan.replicas);
        if (plan.replicas_auto && plan.tp >= 1 && plan.pp >= 1)
          plan.replicas = std::max<int64_t>(1, sc.system.num_gpus / plan.tp / plan.pp);
      }
      // Unpublished data types are the checkpoint's: an FP8 checkpoint (config.json
      // quantization_config, and every DeepSeek-V3-architecture release) serves FP8
      // weights, others their 16-bit weights. FP8 weights run with FP8 activations,
      // quantized per token (group) on the fly, where the GPU has FP8 tensor cores, as
      // vLLM's and SGLang's Fp8LinearMethod do, and weight-only (W8A16) where it has not.
      auto resolve_dtypes = [&](InferencePlan& q) {
        if (q.activation_dtype_auto)
          q.activation_dtype = q.weight_dtype == DType::fp8 && sc.system.gpu.peak_fp8_tflops > 0 ? DType::fp8 : DType::bf16;
      };
      if (plan.weight_dtype_auto) plan.weight_dtype = sc.model.fp8_weight_block > 0 ? DType::fp8 : DType::bf16;
      resolve_dtypes(plan);
      // Checkpoint weights that leave no room for the KV cache are not what the source ran
      // ("auto": what fits): its FP8 quantization where the GPU has FP8 tensor cores (vLLM's
      // and SGLang's --quantization fp8 of a 16-bit checkpoint, TensorRT-LLM's FP8 engines).
      if (plan.weight_dtype_auto && plan.weight_dtype != DType::fp8 && sc.system.gpu.peak_fp8_tflops > 0 &&
          issues.empty() && plan.tp >= 1 && plan.pp >= 1 && !inference_memory(sc.model, sc.system, plan).fits) {
        InferencePlan fp8 = plan;
        fp8.weight_dtype = DType::fp8;
        resolve_dtypes(fp8);
        if (inference_memory(sc.model, sc.system, fp8).fits) plan = fp8;
      }
      sc.inference = plan;
    } else {
      issues.push_back({"/inference", "", "is required for kind \"inference\"", {}});
    }
    top.allow("training");
  }
  top.finish();
  if (!cluster_rules) {
    if (!issues.empty()) throw InputError(std::move(issues));
    return sc;
  }
  // FP8 math needs FP8 tensor cores: on a GPU without them the answer would be for
  // another data type than the one asked for. FP8 weights with 16-bit activations are
  // weight-only (W8A16): dequantized to bf16 inside the GEMM, as vLLM's FP8 Marlin kernel
  // runs FP8 checkpoints on Ampere (vllm PR #5975, v0.5.1; its docs: "Ampere GPUs are
  // supported for W8A16 (weight-only FP8) utilizing Marlin kernels").
  if (!sc.system.gpu.id.empty() && sc.system.gpu.peak_fp8_tflops <= 0) {
    auto no_fp8 = [&](const std::string& pointer, DType d, const std::string& hint) {
      if (d == DType::fp8 && !has_issue_at(issues, pointer))
        issues.push_back({pointer, "\"fp8\"", "needs FP8 tensor cores, which " + sc.system.gpu.id + " does not have", hint});
    };
    if (sc.training && !sc.training->precision_auto)
      no_fp8("/training/precision", sc.training->precision, "use bf16 or a GPU with FP8 (Hopper or later)");
    if (sc.inference)
      no_fp8("/inference/activation_dtype", sc.inference->activation_dtype,
             "use bf16 activations (FP8 weights then run weight-only, W8A16) or a GPU with FP8 (Hopper or later)");
  }
  // Layout rules need the model and the GPU; they are checked even when other keys have
  // problems, so that every problem is reported at once, but not when a key they read was
  // itself rejected: they would judge the default standing in for it, a value never written.
  if (sc.model.layers > 0 && !sc.system.gpu.id.empty() && !layout_input_rejected(issues)) {
    // Split RL placement: the training layout covers the trainer's pool, not every GPU.
    Scenario trainer = sc;
    std::string pool;  // what the layout covers where it is not every GPU
    if (sc.rl && sc.rl->placement == RlSpec::Placement::split) {
      trainer.system.num_gpus = sc.rl->train_gpus;
      pool = "the training pool (rl.gpus.train = " + std::to_string(sc.rl->train_gpus) + ")";
    }
    // Split distillation: the student's layout covers the GPUs the teacher leaves.
    if (sc.distill && sc.distill->placement == DistillSpec::Placement::split && sc.distill->teacher_gpus < sc.system.num_gpus) {
      trainer.system.num_gpus = sc.system.num_gpus - sc.distill->teacher_gpus;
      pool = "the student's GPUs (num_gpus " + std::to_string(sc.system.num_gpus) + " less distill.teacher_gpus " +
             std::to_string(sc.distill->teacher_gpus) + " = " + std::to_string(trainer.system.num_gpus) + ")";
    }
    if (sc.rl && sc.rl->pools_auto) {
      // Pools still to choose: some split must leave both a valid layout.
      std::string why;
      if (rl_pool_candidates(sc, &why).empty()) issues.push_back(rl_no_split_issue(sc.system.num_gpus, why));
    } else {
      auto layout = sc.training ? check_training_layout(trainer) : check_inference_layout(sc);
      // The GPU count rule is then about that pool: say so, with the case's own num_gpus.
      for (Issue& i : layout)
        if (!pool.empty() && i.pointer == "/system/num_gpus") {
          i.value = std::to_string(sc.system.num_gpus);
          const size_t at = i.rule.rfind(" must equal num_gpus");
          if (at != std::string::npos) i.rule = i.rule.substr(0, at) + " must equal " + pool;
        }
      issues.insert(issues.end(), layout.begin(), layout.end());
    }
    if (sc.system.num_gpus > sc.system.gpus_per_node && sc.system.nic_gbps_per_gpu <= 0 &&
        !has_issue_at(issues, "/system/nic_gbps_per_gpu"))
      issues.push_back({"/system/nic_gbps_per_gpu", sc.system.nic_auto ? "\"auto\"" : "",
                        "is required when the job spans several nodes",
                        sc.system.nic_auto ? sc.system.gpu.id + " has no reference node to take it from; give the Gb/s per GPU"
                                           : ""});
  }
  if (!issues.empty()) throw InputError(std::move(issues));
  return sc;
}

}  // namespace

Scenario scenario_from_json(const json& doc, const fs::path& base_dir, EngineKeys engine_keys) {
  return read_scenario(doc, base_dir, engine_keys, true);
}

Scenario scenario_template_from_json(const json& doc, const fs::path& base_dir) {
  return read_scenario(doc, base_dir, EngineKeys::reject_unknown, false);
}

Scenario load_scenario(const fs::path& path, const std::vector<std::string>& sets) {
  json doc = read_json_file(path);
  apply_overrides(doc, sets);
  return scenario_from_json(doc, path.parent_path());
}

}  // namespace capsim::io
