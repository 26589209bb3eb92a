#include "capsim/core/layout.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>

namespace capsim {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

/// a * b, saturating at the largest int64 (absurd inputs must not wrap to 0 and divide by it).
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
int64_t mul(int64_t a, int64_t b, int64_t c) { return mul(mul(a, b), c); }
int64_t mul(int64_t a, int64_t b, int64_t c, int64_t d) { return mul(mul(a, b, c), d); }

void need(std::vector<Issue>& out, bool ok, std::string pointer, std::string value, std::string rule) {
  if (!ok) out.push_back({std::move(pointer), std::move(value), std::move(rule), {}});
}

}  // namespace

std::vector<TrainingPlan> layout_candidates(const Scenario& s) {
  const TrainingPlan& base = *s.training;
  if (base.auto_layout == 0) return {base};
  const ModelSpec& m = s.model;
  const int64_t n = s.system.num_gpus;
  auto powers = [](int64_t limit) {  // 1, 2, 4, ... up to limit, without overflowing
    std::vector<int64_t> out = {1};
    while (out.back() <= limit / 2) out.push_back(out.back() * 2);
    return out;
  };
  const unsigned a = base.auto_layout;
  const std::vector<int64_t> tps = a & kAutoTp ? powers(std::min(n, s.system.gpus_per_node)) : std::vector<int64_t>{base.tp};
  std::vector<TrainingPlan> out;
  Scenario probe = s;
  for (int64_t tp : tps) {
    const std::vector<int64_t> cps = a & kAutoCp ? powers(std::max<int64_t>(1, base.seq_len / 1024)) : std::vector<int64_t>{base.cp};
    for (int64_t cp : cps) {
      // Products checked by division first: no product of the degrees may overflow.
      if (tp > n || cp > n / tp || n % (tp * cp) != 0) continue;
      // pp at most the layer count: counting up to it stays cheap for any GPU count.
      std::vector<int64_t> pps = {base.pp};
      if (a & kAutoPp) {
        pps.clear();
        for (int64_t pp = 1; pp <= std::min(m.layers, n / (tp * cp)); ++pp)
          if ((n / (tp * cp)) % pp == 0) pps.push_back(pp);
      }
      for (int64_t pp : pps) {
        if (pp > m.layers || pp > n / (tp * cp) || n % (tp * cp * pp) != 0) continue;
        const int64_t dp = a & kAutoDp ? n / (tp * cp * pp) : base.dp;
        std::vector<int64_t> eps = {base.ep};
        if (a & kAutoEp) eps = m.moe ? divisors(m.moe->num_experts) : std::vector<int64_t>{1};
        for (int64_t ep : eps) {
          TrainingPlan t = base;
          t.tp = tp;
          t.cp = cp;
          t.pp = pp;
          t.dp = dp;
          t.ep = ep;
          if (a & kAutoSp) t.sp = tp > 1;
          t.auto_layout = 0;
          probe.training = t;
          // Sequence-length rules aside: packed and padded sequences (the post-training
          // updates' mean lengths) split over any tp*cp.
          const std::vector<Issue> issues = check_training_layout(probe);
          if (std::all_of(issues.begin(), issues.end(), [](const Issue& i) { return i.pointer == "/training/seq_len"; }))
            out.push_back(t);
        }
      }
    }
  }
  return out;
}

std::vector<Issue> check_training_layout(const Scenario& s) {
  std::vector<Issue> out;
  if (!s.training) return out;
  const TrainingPlan& t = *s.training;
  const ModelSpec& m = s.model;
  if (t.auto_layout != 0) {
    // The rules hold for some layout the auto fields can take, or for none.
    if (layout_candidates(s).empty()) {
      std::string fields;
      for (unsigned bit = 0; bit < std::size(kAutoLayoutNames); ++bit)
        if (t.auto_layout & (1u << bit)) fields += (fields.empty() ? "" : ", ") + std::string(kAutoLayoutNames[bit]);
      out.push_back({"/training", "auto: " + fields,
                     "no layout of " + str(s.system.num_gpus) + " GPUs with the given fields satisfies the layout rules", {}});
    }
    return out;
  }
  auto positive = [&](const char* key, int64_t v) {
    need(out, v >= 1, std::string("/training/") + key, str(v), "must be a positive integer");
  };
  positive("tp", t.tp);
  positive("pp", t.pp);
  positive("dp", t.dp);
  positive("cp", t.cp);
  positive("ep", t.ep);
  positive("global_batch", t.global_batch);
  positive("seq_len", t.seq_len);
  if (t.vpp) positive("vpp", *t.vpp);
  if (t.etp) positive("etp", *t.etp);
  if (t.micro_batch) positive("micro_batch", *t.micro_batch);
  if (t.zero) need(out, *t.zero >= 0 && *t.zero <= 3, "/training/zero", str(*t.zero), "must be 0, 1, 2 or 3");
  if (!out.empty()) return out;  // later rules divide by these

  if (m.heads % t.tp != 0)
    out.push_back({"/training/tp", str(t.tp),
                   "attention heads (" + str(m.heads) + ") must be divisible by tp", {}});
  if (!m.mla && m.kv_heads % t.tp != 0 && t.tp % m.kv_heads != 0)
    out.push_back({"/training/tp", str(t.tp),
                   "key/value heads (" + str(m.kv_heads) + ") must be divisible by tp (or tp by them)", {}});
  const int64_t product = mul(t.tp, t.pp, t.dp, t.cp);
  if (product != s.system.num_gpus)
    out.push_back({"/system/num_gpus", str(s.system.num_gpus),
                   "tp*pp*dp*cp = " + str(t.tp) + "*" + str(t.pp) + "*" + str(t.dp) + "*" + str(t.cp) +
                       " = " + str(product) + " must equal num_gpus",
                   {}});
  const int64_t vpp = t.vpp.value_or(1);
  if (mul(t.pp, vpp) > m.layers)
    out.push_back({t.vpp && vpp > 1 ? "/training/vpp" : "/training/pp", str(t.vpp && vpp > 1 ? vpp : t.pp),
                   "pipeline stages pp*vpp = " + str(mul(t.pp, vpp)) + " exceed the model's " + str(m.layers) +
                       " layers",
                   {}});
  if (t.schedule != Schedule::one_f_one_b && t.vpp && *t.vpp > 1)
    out.push_back({"/training/vpp", str(*t.vpp),
                   std::string(to_string(t.schedule)) + " has no interleaving: vpp must be 1 (interleaving needs \"1f1b\")", {}});
  if (t.schedule == Schedule::dualpipe) {
    if (t.pp % 2 != 0 || t.pp < 2)
      out.push_back({"/training/pp", str(t.pp), "DualPipe needs an even number of pipeline stages", {}});
    if (t.micro_batch) {
      const int64_t mb = t.global_batch / mul(*t.micro_batch, t.dp);
      if (mb % 2 != 0 || mb < 2 * t.pp)
        out.push_back({"/training/global_batch", str(t.global_batch),
                       "DualPipe needs an even microbatch count of at least 2*pp = " + str(2 * t.pp) +
                           "; global_batch/(micro_batch*dp) = " + str(mb),
                       {}});
    }
  }
  if (!t.stage_layers.empty()) {
    int64_t sum = 0;
    for (auto v : t.stage_layers) sum += v;
    if (static_cast<int64_t>(t.stage_layers.size()) != mul(t.pp, vpp) || sum != m.layers)
      out.push_back({"/training/stage_layers", str(static_cast<int64_t>(t.stage_layers.size())) + " entries",
                     "must list pp*vpp = " + str(mul(t.pp, vpp)) + " stages summing to " + str(m.layers) + " layers",
                     {}});
  }
  if (t.vpp && *t.vpp > 1 && t.micro_batch) {
    const int64_t mb = t.global_batch / mul(*t.micro_batch, t.dp);
    if (mb % t.pp != 0)
      out.push_back({"/training/vpp", str(*t.vpp),
                     "interleaved pipelines need the microbatch count (" + str(mb) + ") divisible by pp (" +
                         str(t.pp) + ")",
                     {}});
  }
  if (m.moe) {
    if (m.moe->num_experts % t.ep != 0)
      out.push_back({"/training/ep", str(t.ep),
                     "routed experts (" + str(m.moe->num_experts) + ") must be divisible by ep", {}});
    const int64_t etp = t.etp.value_or(1);
    if (mul(t.tp, t.cp, t.dp) % mul(t.ep, etp) != 0)
      out.push_back({"/training/ep", str(t.ep),
                     "ep*etp = " + str(mul(t.ep, etp)) + " must divide tp*cp*dp = " + str(mul(t.tp, t.cp, t.dp)) +
                         " (expert parallelism folds into the data/tensor/context ranks)",
                     {}});
  } else if (t.ep != 1) {
    out.push_back({"/training/ep", str(t.ep), "ep > 1 needs a mixture-of-experts model", {}});
  }
  if (t.micro_batch) {
    if (t.global_batch % mul(*t.micro_batch, t.dp) != 0)
      out.push_back({"/training/global_batch", str(t.global_batch),
                     "must be divisible by micro_batch*dp = " + str(*t.micro_batch) + "*" + str(t.dp) + " = " +
                         str(mul(*t.micro_batch, t.dp)),
                     {}});
  } else if (t.global_batch % t.dp != 0) {
    out.push_back({"/training/global_batch", str(t.global_batch),
                   "must be divisible by dp = " + str(t.dp), {}});
  }
  if (t.seq_len % t.cp != 0)
    out.push_back({"/training/seq_len", str(t.seq_len), "must be divisible by cp = " + str(t.cp), {}});
  if (t.document_tokens) {
    need(out, *t.document_tokens >= 1 && *t.document_tokens <= t.seq_len, "/training/document_tokens",
         str(*t.document_tokens), "must be between 1 and seq_len = " + str(t.seq_len));
    if (*t.document_tokens <= t.seq_len)
      need(out, cp_fits_documents(t, t.cp), "/training/document_tokens", str(*t.document_tokens),
           "context parallelism splits each document into 2*cp = " + str(mul(2, t.cp)) + " chunks; needs at least that many tokens");
  }
  if (t.sp && t.seq_len % mul(t.tp, t.cp) != 0)
    out.push_back({"/training/seq_len", str(t.seq_len),
                   "sequence parallelism needs seq_len divisible by tp*cp = " + str(mul(t.tp, t.cp)), {}});
  if (t.precision != DType::fp16 && t.precision != DType::bf16 && t.precision != DType::fp8)
    out.push_back({"/training/precision", std::string(to_string(t.precision)), "must be fp16, bf16 or fp8", {}});
  if (t.precision == DType::fp8 && s.system.gpu.peak_fp8_tflops <= 0)
    out.push_back({"/training/precision", "fp8",
                   "fp8 tensor cores are not available on " + s.system.gpu.id, {}});
  if (s.system.gpus_per_node < 1)
    out.push_back({"/system/gpus_per_node", str(s.system.gpus_per_node), "must be a positive integer", {}});
  return out;
}

bool cp_fits_documents(const TrainingPlan& t, int64_t cp) { return cp <= 1 || cp <= attention_span(t) / 2; }

std::vector<Issue> check_inference_layout(const Scenario& s) {
  std::vector<Issue> out;
  if (!s.inference) return out;
  const InferencePlan& p = *s.inference;
  const ModelSpec& m = s.model;
  need(out, p.tp >= 1, "/inference/tp", str(p.tp), "must be a positive integer");
  need(out, p.pp >= 1, "/inference/pp", str(p.pp), "must be a positive integer");
  need(out, p.replicas >= 1, "/inference/replicas", str(p.replicas), "must be a positive integer");
  if (!out.empty()) return out;
  if (m.heads % p.tp != 0)
    out.push_back({"/inference/tp", str(p.tp), "attention heads (" + str(m.heads) + ") must be divisible by tp", {}});
  if (p.pp > m.layers)
    out.push_back({"/inference/pp", str(p.pp), "pipeline stages exceed the model's " + str(m.layers) + " layers", {}});
  if (p.ep && *p.ep > 1) {
    if (!m.moe) out.push_back({"/inference/ep", str(*p.ep), "ep > 1 needs a mixture-of-experts model", {}});
    else if (m.moe->num_experts % *p.ep != 0)
      out.push_back({"/inference/ep", str(*p.ep),
                     "routed experts (" + str(m.moe->num_experts) + ") must be divisible by ep", {}});
  }
  const int64_t per_replica = p.tp * p.pp;
  if ((p.prefill_replicas > 0) != (p.decode_replicas > 0))
    out.push_back({"/inference/disaggregation", "", "needs both prefill_replicas and decode_replicas", {}});
  if (p.prefill_replicas > 0 && per_replica * (p.prefill_replicas + p.decode_replicas) > s.system.num_gpus)
    out.push_back({"/system/num_gpus", str(s.system.num_gpus),
                   "tp*pp*(prefill_replicas+decode_replicas) = " + str(per_replica * (p.prefill_replicas + p.decode_replicas)) +
                       " exceeds num_gpus",
                   {}});
  if (p.prefill_replicas == 0 && per_replica * p.replicas > s.system.num_gpus)
    out.push_back({"/system/num_gpus", str(s.system.num_gpus),
                   "tp*pp*replicas = " + str(per_replica * p.replicas) + " exceeds num_gpus", {}});
  if (p.engine.gpu_memory_utilization &&
      (*p.engine.gpu_memory_utilization <= 0 || *p.engine.gpu_memory_utilization > 1))
    out.push_back({"/inference/engine/gpu_memory_utilization", std::to_string(*p.engine.gpu_memory_utilization),
                   "must be in (0, 1]", {}});
  return out;
}

std::vector<int64_t> split_layers(int64_t layers, int64_t stages, int64_t mtp) {
  std::vector<int64_t> out(static_cast<size_t>(stages), layers / stages);
  if ((layers % stages == 0 && mtp == 0) || stages == 1) {
    if (stages == 1) out[0] = layers;
    return out;
  }
  // Embedding and loss each take the place of one layer, as does each MTP module.
  const int64_t units = layers + 2 + mtp;
  const int64_t base = units / stages;
  int64_t extra = units % stages;
  for (auto& v : out) v = base;
  // Give the remainder to stages from the second onwards, then from the first.
  for (int64_t i = 1; i < stages && extra > 0; ++i, --extra) out[static_cast<size_t>(i)] += 1;
  if (extra > 0) out[0] += 1;
  out.front() -= 1;
  out.back() -= 1 + mtp;
  // A stage left with no layer (tiny models) borrows from the largest; the last stage may
  // hold only the MTP modules and the loss.
  for (size_t i = 0; i < out.size(); ++i) {
    auto& v = out[i];
    const int64_t least = mtp > 0 && i + 1 == out.size() ? 0 : 1;
    while (v < least) {
      auto it = std::max_element(out.begin(), out.end());
      *it -= 1;
      v += 1;
    }
  }
  return out;
}

int64_t inflight_chunks(int64_t pp, int64_t vpp, int64_t rank, int64_t microbatches) {
  if (vpp <= 1) return std::min(pp - rank, microbatches);
  const int64_t warmup = 2 * (pp - rank - 1) + (vpp - 1) * pp;
  return std::min(warmup + 1, microbatches * vpp);
}

int64_t ep_overlap_warmup(int64_t pp, int64_t vpp, int64_t rank, int64_t microbatches) {
  const int64_t total = microbatches * vpp;
  if (pp <= 1) return std::min<int64_t>(1, total);
  const int64_t own = vpp > 1 ? 2 * (pp - rank - 1) + (vpp - 1) * pp : pp - rank - 1;
  return std::min(own + 1, total);
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      low.push_back(i);
      if (i != n / i) high.push_back(n / i);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

int64_t num_microbatches(const TrainingPlan& t) {
  const int64_t mb = t.micro_batch.value_or(1);
  return t.global_batch / (mb * t.dp);
}

}  // namespace capsim
