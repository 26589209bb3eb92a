#include "capsim/io/plan_io.hpp"

#include <nlohmann/json.hpp>
#include <optional>

#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim::io {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// Default $/GPU-hour from data/prices.json (read when an offer first needs it): price and
/// "title (url); note" of its source.
std::optional<std::pair<double, std::string>> default_price(const json& d, const std::string& gpu) {
  const json& p = d.at("prices");
  if (!p.contains(gpu)) return std::nullopt;
  const json& src = d.at("sources").at(p[gpu].at("source").get<std::string>());
  return std::make_pair(p[gpu].at("usd_per_gpu_hour").get<double>(),
                        src.at("title").get<std::string>() + " (" + src.at("url").get<std::string>() + "); " +
                            p[gpu].value("note", ""));
}

std::string default_price_ids(const json& d) {
  std::string out;
  for (auto it = d.at("prices").begin(); it != d.at("prices").end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
  return out;
}

json prices_json(const PlanRequest& req) {
  json a = json::array();
  for (const auto& o : req.offers)
    a.push_back({{"gpu", o.system.gpu.id}, {"usd_per_gpu_hour", o.usd_per_gpu_hour}, {"source", o.price_source}});
  return a;
}


bool dtype_of(const std::string& s, DType& d) {
  if (s == "bf16") d = DType::bf16;
  else if (s == "fp16") d = DType::fp16;
  else if (s == "fp8") d = DType::fp8;
  else if (s == "int8") d = DType::int8;
  else if (s == "int4") d = DType::int4;
  else return false;
  return true;
}

void read_length_spec(const json& v, const std::string& ptr, LengthDist& d, std::vector<Issue>& issues) {
  if (v.is_number()) {
    d = {LengthDist::Kind::fixed, v.get<double>(), 0, 0};
    return;
  }
  ObjectReader r(v, ptr, issues);
  std::string dist = "fixed";
  r.number("mean", d.mean, true, 1);
  r.choice("dist", dist, {"fixed", "uniform", "sharegpt"});
  d.kind = dist == "uniform" ? LengthDist::Kind::uniform : dist == "sharegpt" ? LengthDist::Kind::sharegpt : LengthDist::Kind::fixed;
  r.number("min", d.min, d.kind == LengthDist::Kind::uniform, 1);
  r.number("max", d.max, d.kind == LengthDist::Kind::uniform, 1);
  r.finish();
}

/// The `rl` goal: prompts, deadline, cluster sizes, and `training`, the actor's update
/// layout and its `rl` block as in a ppo/grpo scenario, read by the scenario reader, less
/// what the planner chooses per cluster (dp, rl.placement, rl.gpus).
void read_rl_goal(const json& v, const json& doc, const fs::path& path, PlanRequest& req, std::vector<Issue>& issues) {
  ObjectReader r(v, "/rl", issues);
  if (!v.is_object()) {
    issues.push_back({"/rl", brief(v), "must be an object", {}});
    return;
  }
  RlGoal& goal = req.rl_goal;
  const bool has_prompts = r.integer("prompts", goal.prompts, true);
  r.number("deadline_days", goal.deadline_days, true, 0);
  if (r.has("deadline_days") && v["deadline_days"].is_number() && v["deadline_days"].get<double>() == 0)
    issues.push_back({r.at("deadline_days"), brief(v["deadline_days"]), "must be a number > 0", {}});
  if (const json* g = r.get("gpu_counts")) {
    if (!g->is_array() || g->empty()) {
      issues.push_back({r.at("gpu_counts"), brief(*g), "must be a non-empty list of GPU counts", {}});
    } else {
      for (size_t i = 0; i < g->size(); ++i) {
        if ((*g)[i].is_number_integer() && (*g)[i].get<int64_t>() >= 1) goal.gpu_counts.push_back((*g)[i].get<int64_t>());
        else issues.push_back({r.at("gpu_counts") + "/" + std::to_string(i), brief((*g)[i]), "must be an integer >= 1", {}});
      }
    }
  } else {
    issues.push_back({r.at("gpu_counts"), "", "is required: a non-empty list of GPU counts", {}});
  }
  if (const json* f = r.get("gpu_memory_utilization")) {
    ObjectReader fr(*f, r.at("gpu_memory_utilization"), issues);
    if (!f->is_object()) {
      issues.push_back({r.at("gpu_memory_utilization"), brief(*f), "must be an object: {\"colocated\": x, \"split\": y}", {}});
    } else {
      for (const char* k : {"colocated", "split"}) {
        double u = 0;
        if (!fr.number(k, u, false, 0)) continue;
        if (u <= 0 || u > 1) issues.push_back({fr.at(k), brief((*f)[k]), "must be in (0, 1]", {}});
        else (std::string(k) == "split" ? goal.gpu_memory_utilization_split : goal.gpu_memory_utilization_colocated) = u;
      }
      fr.finish();
    }
  }
  const json* t = r.get("training");
  r.finish();
  if (!t) {
    issues.push_back({"/rl/training", "", "is required: the actor's update layout with mode \"grpo\" or \"ppo\" and its rl block", {}});
    return;
  }
  if (!t->is_object()) {
    issues.push_back({"/rl/training", brief(*t), "must be an object", {}});
    return;
  }
  // The layout and rl block go through the scenario reader: a document with the plan's
  // model and the first offer's GPU, the planner's keys filled with placeholders that
  // pass its rules; its pointers are moved under /rl.
  json training = *t;
  const std::string chosen = "is chosen by the planner for each cluster";
  if (training.contains("dp")) {
    issues.push_back({"/rl/training/dp", brief(training["dp"]), chosen + " (the training pool / (tp*pp*cp))", "remove it"});
    training.erase("dp");
  }
  std::string mode = training.contains("mode") && training["mode"].is_string() ? training["mode"].get<std::string>() : "";
  if (mode != "grpo" && mode != "ppo")
    issues.push_back({"/rl/training/mode", training.contains("mode") ? brief(training["mode"]) : "",
                      "must be \"grpo\" or \"ppo\" for an RL goal", {}});
  int64_t engine_gpus = 1;
  if (json* rl = training.contains("rl") && training["rl"].is_object() ? &training["rl"] : nullptr) {
    for (const char* k : {"placement", "gpus"})
      if (rl->contains(k)) {
        issues.push_back({std::string("/rl/training/rl/") + k, brief((*rl)[k]), chosen + " (colocated, and split pools)",
                          "remove it"});
        rl->erase(k);
      }
    if (rl->contains("async_staleness")) {
      const json& a = (*rl)["async_staleness"];
      if (a.is_string() && a == "auto") goal.staleness = {0, 1};
      else if (a.is_number_integer() && a.get<int64_t>() >= 0) goal.staleness = {a.get<int64_t>()};
      else
        issues.push_back({"/rl/training/rl/async_staleness", brief(a),
                          "must be an integer >= 0 or \"auto\" (0 and 1 for split placements)", {}});
      rl->erase("async_staleness");
    }
    if (rl->contains("rollout") && (*rl)["rollout"].is_object())
      for (const char* k : {"tp", "pp"})
        if (const json& x = (*rl)["rollout"].value(k, json(1)); x.is_number_integer() && x.get<int64_t>() >= 1)
          engine_gpus *= x.get<int64_t>();
    (*rl)["placement"] = "colocated";
    (*rl)["gpus"] = {{"rollout", engine_gpus}, {"train", engine_gpus}};
  }
  const GpuOffer* first = nullptr;
  for (const GpuOffer& o : req.offers)
    if (!o.system.gpu.id.empty()) {
      first = &o;
      break;
    }
  if (!first || !doc.contains("model")) return;  // reported with the offers and the model
  json sc = {{"kind", "training"},
             {"model", doc["model"]},
             {"system", {{"gpu", first->system.gpu.id}, {"num_gpus", engine_gpus}}},
             {"training", training}};
  try {
    const Scenario s = scenario_template_from_json(sc, path.parent_path());
    req.base.training = s.training;
    req.base.rl = s.rl;
  } catch (const InputError& e) {
    for (Issue i : e.issues()) {
      if (i.pointer.rfind("/training", 0) != 0) continue;  // the model and the system: reported above
      i.pointer = "/rl" + i.pointer;
      issues.push_back(std::move(i));
    }
  }
  // Read from the document, so that it is checked even when the block has other problems.
  const json pps = t->contains("rl") && (*t)["rl"].is_object() ? (*t)["rl"].value("prompts_per_step", json()) : json();
  if (has_prompts && pps.is_number_integer() && pps.get<int64_t>() >= 1 && goal.prompts % pps.get<int64_t>() != 0)
    issues.push_back({"/rl/prompts", std::to_string(goal.prompts),
                      "must be a whole number of iterations: a multiple of training.rl.prompts_per_step (" +
                          std::to_string(pps.get<int64_t>()) + ")",
                      {}});
}

}  // namespace

PlanRequest load_plan(const fs::path& path) {
  const json doc = read_json_file(path);
  std::vector<Issue> issues;
  PlanRequest req;
  ObjectReader top(doc, "", issues);
  top.allow("schema");
  top.allow("description");
  top.string("id", req.base.id);
  if (const json* m = top.get("model")) {
    try {
      req.base.model = m->is_string() ? load_model(m->get<std::string>(), "/model", path.parent_path())
                                      : model_from_hf_config(*m, "/model", "model");
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  } else {
    issues.push_back({"/model", "", "is required", {}});
  }
  json prices;  // data/prices.json, read once if an offer has no price
  if (const json* o = top.get("offers"); o && o->is_array() && !o->empty()) {
    for (size_t i = 0; i < o->size(); ++i) {
      const std::string ptr = "/offers/" + std::to_string(i);
      ObjectReader r((*o)[i], ptr, issues);
      GpuOffer offer;
      std::string gpu;
      if (r.string("gpu", gpu, true)) {
        try {
          offer.system.gpu = load_gpu(gpu, r.at("gpu"));
        } catch (const InputError& e) {
          issues.insert(issues.end(), e.issues().begin(), e.issues().end());
        }
      }
      if ((*o)[i].is_object() && (*o)[i].contains("usd_per_gpu_hour")) {
        r.number("usd_per_gpu_hour", offer.usd_per_gpu_hour, true, 0);
        offer.price_source = "plan file";
      } else if (!gpu.empty()) {
        if (prices.is_null()) prices = read_json_file(data_dir() / "prices.json");
        if (const auto d = default_price(prices, gpu)) {
          offer.usd_per_gpu_hour = d->first;
          offer.price_source = d->second;
        } else {
          issues.push_back({ptr + "/usd_per_gpu_hour", "", "is required: no default price for " + gpu,
                            "defaults (data/prices.json) cover " + default_price_ids(prices)});
        }
      }
      offer.system.gpus_per_node = 8;
      r.integer("gpus_per_node", offer.system.gpus_per_node);
      offer.system.nic_gbps_per_gpu = 400;
      r.number("nic_gbps_per_gpu", offer.system.nic_gbps_per_gpu, false, 0);
      r.finish();
      req.offers.push_back(offer);
    }
  } else {
    issues.push_back({"/offers", "", "is required: a non-empty list of {gpu, usd_per_gpu_hour[, gpus_per_node, nic_gbps_per_gpu]}", {}});
  }
  const json* tr = top.get("training");
  const json* sv = top.get("serving");
  const json* rg = top.get("rl");
  if ((tr != nullptr) + (sv != nullptr) + (rg != nullptr) != 1)
    issues.push_back({"", "", "needs exactly one of \"training\", \"serving\" and \"rl\"", {}});
  if (tr) {
    req.training = true;
    ObjectReader r(*tr, "/training", issues);
    TrainingPlan t;
    t.micro_batch = 1;
    bool chinchilla = false;
    r.boolean("chinchilla", chinchilla);
    r.number("tokens", req.train_goal.tokens, !chinchilla, 1);
    r.number("deadline_days", req.train_goal.deadline_days, false, 0);
    r.number("budget_usd", req.train_goal.budget_usd, false, 0);
    r.number("pue", req.train_goal.pue, false, 1.0);
    r.fraction_or_auto("effective_training_fraction", req.train_goal.effective_fraction);
    r.integer("global_batch", t.global_batch, true);
    r.integer("seq_len", t.seq_len, true);
    std::string prec = "bf16";
    if (r.choice("precision", prec, {"fp16", "bf16", "fp8"}, false, true)) {
      // "auto": each offer's search ranks the layouts of both precisions (search_training).
      t.precision_auto = prec == "auto";
      if (!t.precision_auto) dtype_of(prec, t.precision);
    }
    if (const json* g = r.get("gpu_counts")) {
      if (!g->is_array()) issues.push_back({r.at("gpu_counts"), brief(*g), "must be a list of GPU counts", {}});
      else
        for (size_t i = 0; i < g->size(); ++i) {
          if ((*g)[i].is_number_integer() && (*g)[i].get<int64_t>() >= 1) req.train_goal.gpu_counts.push_back((*g)[i].get<int64_t>());
          else issues.push_back({r.at("gpu_counts") + "/" + std::to_string(i), brief((*g)[i]), "must be an integer >= 1", {}});
        }
    } else {
      for (int64_t n = 8; n <= 16384; n *= 2) req.train_goal.gpu_counts.push_back(n);
    }
    r.finish();
    if (chinchilla && req.base.model.layers > 0)
      /// Compute-optimal data: about 20 tokens per parameter (Hoffmann et al. 2022, Table 3).
      req.train_goal.tokens = 20.0 * static_cast<double>(count_params(req.base.model).total);
    req.base.training = t;
  }
  if (sv) {
    req.training = false;
    ObjectReader r(*sv, "/serving", issues);
    InferencePlan p;
    r.number("qps", req.serve_goal.qps, true, 0);
    r.number("ttft_p99_ms", req.serve_goal.sla.ttft_p99_ms, false, 0);
    r.number("tpot_p99_ms", req.serve_goal.sla.tpot_p99_ms, false, 0);
    if (const json* v = r.get("input_tokens")) read_length_spec(*v, r.at("input_tokens"), p.workload.input_tokens, issues);
    else issues.push_back({r.at("input_tokens"), "", "is required", {}});
    if (const json* v = r.get("output_tokens")) read_length_spec(*v, r.at("output_tokens"), p.workload.output_tokens, issues);
    else issues.push_back({r.at("output_tokens"), "", "is required", {}});
    if (const json* t = r.get("tp")) {
      req.serve_goal.tp.clear();
      if (!t->is_array() || t->empty()) issues.push_back({r.at("tp"), brief(*t), "must be a non-empty list of TP sizes", {}});
      else
        for (size_t i = 0; i < t->size(); ++i) {
          if ((*t)[i].is_number_integer() && (*t)[i].get<int64_t>() >= 1) req.serve_goal.tp.push_back((*t)[i].get<int64_t>());
          else issues.push_back({r.at("tp") + "/" + std::to_string(i), brief((*t)[i]), "must be an integer >= 1", {}});
        }
    }
    if (const json* d = r.get("disaggregation")) {
      // [[prefill, decode], ...] replica ratios of disaggregated units; [] = colocated only.
      req.serve_goal.disaggregation.clear();
      if (!d->is_array()) issues.push_back({r.at("disaggregation"), brief(*d), "must be a list of [prefill, decode] pairs", {}});
      else
        for (size_t i = 0; i < d->size(); ++i) {
          const json& e = (*d)[i];
          if (e.is_array() && e.size() == 2 && e[0].is_number_integer() && e[1].is_number_integer() && e[0].get<int64_t>() >= 1 &&
              e[1].get<int64_t>() >= 1)
            req.serve_goal.disaggregation.emplace_back(e[0].get<int64_t>(), e[1].get<int64_t>());
          else
            issues.push_back({r.at("disaggregation") + "/" + std::to_string(i), brief(e), "must be [prefill, decode] with both >= 1", {}});
        }
    }
    r.boolean("expert_parallel", req.serve_goal.expert_parallel);
    if (const json* w = r.get("weight_dtypes")) {
      req.serve_goal.weight_dtypes.clear();
      if (!w->is_array() || w->empty())
        issues.push_back({r.at("weight_dtypes"), brief(*w), "must be a non-empty list of weight types", {}});
      else
        for (size_t i = 0; i < w->size(); ++i) {
          DType d{};
          if (!(*w)[i].is_string() || !dtype_of((*w)[i].get<std::string>(), d))
            issues.push_back({r.at("weight_dtypes") + "/" + std::to_string(i), brief((*w)[i]),
                              "must be bf16, fp16, fp8, int8 or int4", {}});
          else
            req.serve_goal.weight_dtypes.push_back(d);
        }
    }
    r.finish();
    p.workload.mode = ServingWorkload::Mode::poisson;
    req.base.inference = p;
  }
  if (rg) {
    req.training = false;
    req.rl = true;
    read_rl_goal(*rg, doc, path, req, issues);
  }
  top.finish();
  if (!issues.empty()) throw InputError(std::move(issues));
  return req;
}

json training_plan_json(const PlanRequest& req, const std::vector<TrainingOption>& options) {
  json j;
  j["schema"] = "capsim-plan-report/1";
  j["kind"] = "training";
  j["model"] = req.base.model.name;
  j["goal"] = {{"tokens", req.train_goal.tokens}, {"deadline_days", req.train_goal.deadline_days},
               {"budget_usd", req.train_goal.budget_usd}, {"pue", req.train_goal.pue}};
  j["power_model"] = "GPU board power at TDP x PUE; hosts and network excluded";
  j["prices"] = prices_json(req);
  json opts = json::array();
  for (const auto& o : options) {
    json x = {{"gpu", o.gpu}, {"feasible", o.feasible}};
    if (!o.reason.empty()) x["reason"] = o.reason;
    if (o.layout.num_gpus > 0) {
      const auto& t = o.layout.plan;
      x["num_gpus"] = o.layout.num_gpus;
      x["layout"] = {{"tp", t.tp}, {"pp", t.pp}, {"vpp", t.vpp.value_or(1)}, {"dp", t.dp}, {"cp", t.cp}, {"ep", t.ep},
                     {"zero", t.zero.value_or(0)}, {"micro_batch", t.micro_batch.value_or(1)},
                     {"recompute", std::string(to_string(t.recompute.value_or(Recompute::none)))},
                     {"precision", std::string(to_string(t.precision))}};
      x["step_s"] = o.layout.step_s;
      x["tokens_per_s"] = o.layout.tokens_per_s;
      x["mfu"] = o.layout.mfu;
      x["effective_training_fraction"] = o.effective_fraction;
      x["days"] = o.days;
      x["gpu_hours"] = o.gpu_hours;
      x["cost_usd"] = o.cost_usd;
      x["energy_mwh"] = o.energy_mwh;
    }
    opts.push_back(x);
  }
  j["options"] = opts;
  return j;
}

json serving_plan_json(const PlanRequest& req, const std::vector<ServingOption>& options) {
  json j;
  j["schema"] = "capsim-plan-report/1";
  j["kind"] = "serving";
  j["prices"] = prices_json(req);
  j["model"] = req.base.model.name;
  j["goal"] = {{"qps", req.serve_goal.qps},
               {"ttft_p99_ms", req.serve_goal.sla.ttft_p99_ms},
               {"tpot_p99_ms", req.serve_goal.sla.tpot_p99_ms}};
  json opts = json::array();
  for (const auto& o : options) {
    json x = {{"gpu", o.gpu},
              {"tp", o.tp},
              {"ep", o.ep},
              {"weight_dtype", std::string(to_string(o.weight_dtype))},
              {"disaggregated", o.prefill > 0 ? json{{"prefill_replicas", o.prefill}, {"decode_replicas", o.decode}} : json(nullptr)},
              {"gpus_per_replica", o.gpus_per_replica},
              {"feasible", o.feasible}};
    if (o.feasible) {
      x["qps_per_replica"] = o.qps_per_replica;
      x["replicas"] = o.replicas;
      x["gpus"] = o.replicas * o.gpus_per_replica;
      x["usd_per_hour"] = o.usd_per_hour;
      x["usd_per_million_output_tokens"] = o.usd_per_million_output_tokens;
    } else {
      x["reason"] = o.reason;
    }
    opts.push_back(x);
  }
  j["options"] = opts;
  return j;
}

json rl_plan_json(const PlanRequest& req, const RlPlan& plan) {
  const RlSpec& rl = *req.base.rl;
  json j;
  j["schema"] = "capsim-plan-report/1";
  j["kind"] = "rl";
  j["model"] = req.base.model.name;
  j["goal"] = {{"prompts", req.rl_goal.prompts},
               {"samples_per_prompt", rl.group_size},
               {"prompts_per_step", rl.prompts_per_step},
               {"iterations", req.rl_goal.prompts / std::max<int64_t>(1, rl.prompts_per_step)},
               {"deadline_days", req.rl_goal.deadline_days},
               {"gpu_counts", req.rl_goal.gpu_counts},
               {"async_staleness", req.rl_goal.staleness}};
  if (req.rl_goal.gpu_memory_utilization_colocated || req.rl_goal.gpu_memory_utilization_split) {
    json f = json::object();
    if (req.rl_goal.gpu_memory_utilization_colocated) f["colocated"] = *req.rl_goal.gpu_memory_utilization_colocated;
    if (req.rl_goal.gpu_memory_utilization_split) f["split"] = *req.rl_goal.gpu_memory_utilization_split;
    j["goal"]["gpu_memory_utilization"] = f;
  }
  json shares = json::array();
  for (auto [num, den] : req.rl_goal.rollout_shares) shares.push_back(std::to_string(num) + "/" + std::to_string(den));
  j["split_rollout_shares"] = shares;
  j["prices"] = prices_json(req);
  j["meets_goal"] = !plan.best.empty() && plan.best.front().feasible;
  auto option = [](const RlOption& o) {
    const TrainingPlan& t = o.train_layout;
    const InferencePlan& p = o.rollout_layout;
    const RlIteration& it = o.iteration;
    json x = {{"gpu", o.gpu},
              {"num_gpus", o.num_gpus},
              {"placement", o.placement == RlSpec::Placement::split ? "split" : "colocated"},
              {"rollout_gpus", o.rollout_gpus},
              {"train_gpus", o.train_gpus},
              {"async_staleness", o.async_staleness},
              {"feasible", o.feasible}};
    if (!o.reason.empty()) x["reason"] = o.reason;
    x["train_layout"] = {{"tp", t.tp}, {"pp", t.pp}, {"vpp", t.vpp.value_or(1)}, {"dp", t.dp}, {"cp", t.cp}, {"ep", t.ep},
                         {"zero", t.zero.value_or(0)}, {"micro_batch", t.micro_batch.value_or(1)},
                         {"global_batch", t.global_batch}, {"seq_len", t.seq_len},
                         {"recompute", std::string(to_string(t.recompute.value_or(Recompute::none)))},
                         {"precision", std::string(to_string(t.precision))}};
    x["rollout_layout"] = {{"engine", p.profile.id},
                           {"tp", p.tp},
                           {"pp", p.pp},
                           {"ep", p.ep.value_or(1)},
                           {"replicas", p.replicas},
                           {"gpu_memory_utilization", p.engine.gpu_memory_utilization.value_or(p.profile.knobs.gpu_memory_utilization)},
                           {"weight_dtype", std::string(to_string(p.weight_dtype))}};
    x["iteration"] = {{"generation_s", it.generation_s}, {"scoring_s", it.scoring_s}, {"training_s", it.training_s},
                      {"resharding_s", it.resharding_s}, {"offload_s", it.offload_s}, {"step_time_s", it.step_time_s},
                      {"throughput_tokens_per_s", it.throughput_tokens_per_s}, {"bottleneck", it.bottleneck}};
    x["idle_share"] = {{"rollout", o.rollout_idle_share}, {"train", o.train_idle_share}};
    x["iterations"] = o.iterations;
    x["hours"] = o.hours;
    x["days"] = o.days;
    x["gpu_hours"] = o.gpu_hours;
    x["usd_per_gpu_hour"] = o.usd_per_gpu_hour;
    x["cost_usd"] = o.cost_usd;
    return x;
  };
  json best = json::array(), all = json::array(), skipped = json::array();
  for (const auto& o : plan.best) best.push_back(option(o));
  for (const auto& o : plan.candidates) all.push_back(option(o));
  for (const auto& s : plan.skipped) skipped.push_back({{"reason", s.reason}, {"count", s.count}});
  j["best_per_offer"] = best;
  j["candidates"] = all;
  j["skipped"] = skipped;
  return j;
}

}  // namespace capsim::io
