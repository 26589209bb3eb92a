#include "capsim/core/scenario.hpp"

#include <algorithm>

namespace capsim {

std::string_view to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

std::string_view to_string(Schedule s) {
  switch (s) {
    case Schedule::one_f_one_b: return "1f1b";
    case Schedule::gpipe: return "gpipe";
    case Schedule::zb_h1: return "zb-h1";
    case Schedule::dualpipe: return "dualpipe";
  }
  return "?";
}

std::string_view to_string(Optimizer o) {
  switch (o) {
    case Optimizer::adamw: return "adamw";
    case Optimizer::sgd: return "sgd";
    case Optimizer::adafactor: return "adafactor";
    case Optimizer::lion: return "lion";
    case Optimizer::adam8bit: return "adam8bit";
  }
  return "?";
}

std::string_view to_string(Framework f) {
  switch (f) {
    case Framework::megatron: return "megatron";
    case Framework::pytorch: return "pytorch";
  }
  return "?";
}

std::string_view to_string(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::alltoall: return "alltoall";
    case MoeDispatcher::hierarchical: return "hierarchical";
  }
  return "?";
}

MoeDispatcher dispatcher_of(const TrainingPlan& t, const ModelSpec& m) {
  if (t.moe_dispatcher) return *t.moe_dispatcher;
  const bool node_limited = m.moe && m.moe->n_group > 0 && m.moe->topk_group > 0;
  return node_limited ? MoeDispatcher::hierarchical : MoeDispatcher::alltoall;
}

std::string ep_overlap_blocker(const TrainingPlan& t) {
  std::string why;
  auto add = [&](const char* reason) { why += (why.empty() ? "" : "; it ") + std::string(reason); };
  if (t.ep <= 1) add("needs expert parallelism (ep > 1)");
  if (framework_of(t) != Framework::megatron) add("is Megatron-Core's (framework \"megatron\")");
  if (t.recompute && *t.recompute == Recompute::full) add("does not run with full recompute");
  if (t.pp > 1 && t.schedule == Schedule::dualpipe) add("is DualPipe's own under schedule \"dualpipe\"");
  else if (t.pp > 1 && t.vpp && *t.vpp <= 1) add("needs the interleaved schedule (vpp > 1) under a pipeline");
  if (t.vpp.value_or(1) <= 1 && (t.schedule == Schedule::gpipe || t.schedule == Schedule::zb_h1))
    add("runs on Megatron-Core's 1F1B schedules");
  return why;
}

bool ep_overlap_on(const TrainingPlan& t) { return t.ep_overlap.value_or(false) && ep_overlap_blocker(t).empty(); }

double grad_bytes(const TrainingPlan& t) {
  return t.grad_reduce_fp32.value_or(t.precision != DType::fp16) ? 4.0 : 2.0;
}

bool fp8_params(const TrainingPlan& t) {
  // A Megatron-stack feature for full-parameter per-tensor FP8; a layout "auto" resolves
  // to the PyTorch stack (ZeRO-2/3) runs without it, as the report's layout says.
  if (t.precision != DType::fp8 || trains_adapters(t.mode) || framework_of(t) != Framework::megatron ||
      t.fp8_blockwise.value_or(false))
    return false;
  return t.fp8_param_gather.value_or(true);
}

Framework framework_of(const TrainingPlan& t) {
  if (t.framework) return *t.framework;
  // Sharded gradients (ZeRO-2) or parameters (ZeRO-3, FSDP) are the PyTorch and DeepSpeed
  // stacks' (FSDP SHARD_GRAD_OP / FULL_SHARD, DeepSpeed ZeRO); Megatron-LM's distributed
  // optimizer is ZeRO stage 1 (the validation schema, ../shared/validation/SCHEMA.md:
  // "1 = optimizer states sharded (Megatron's distributed optimizer), 2, 3 = FSDP / ZeRO").
  if (t.zero.value_or(0) >= 2) return Framework::pytorch;
  if (trains_adapters(t.mode)) {
    // A 4-bit (NF4) base is bitsandbytes' (Dettmers et al. 2023), a PyTorch library that
    // Megatron-Core does not use; adapters on one GPU without model parallelism are the
    // PyTorch stacks' ground (PEFT, LitGPT, torchtune), while Megatron's PEFT recipes are
    // laid out for tensor and pipeline parallelism.
    const bool four_bit = t.lora && t.lora->base_bytes_per_param < 1.0;
    if (four_bit || t.tp * t.pp * t.cp * t.dp == 1) return Framework::pytorch;
  }
  return Framework::megatron;
}

LoraSpec lora_defaults(Framework f) {
  LoraSpec l;
  if (f == Framework::megatron) {
    // The fastest of the Megatron stacks' published defaults: NeMo 1.x adapts the fused
    // query-key-value projection alone (nemo/collections/nlp/parts/peft_config.py,
    // get_target_modules default ("attention_qkv",), 24.07), with NeMo-Megatron-Launcher's
    // Llama PEFT recipe's adapter_dim 32 and adapter_dropout 0.0
    // (launcher_scripts/conf/peft/llama/squad.yaml, which sets no target_modules). NeMo 2's
    // llm.peft.LoRA (dim 32, dropout 0.0) adds linear_proj, linear_fc1 and linear_fc2:
    // targets o_proj, gate_proj, up_proj and down_proj here.
    l.rank = 32;
    l.targets = std::vector<std::string>{"q_proj", "k_proj", "v_proj"};
    l.dropout = 0.0;
  } else {
    // LitGPT finetune/lora.py (commit 8641822, Oct 2023): lora_r 8 on the query and value
    // projections, lora_dropout 0.05.
    l.rank = 8;
    l.targets = std::vector<std::string>{"q_proj", "v_proj"};
    l.dropout = 0.05;
  }
  return l;
}

LoraSpec resolved_lora(const TrainingPlan& t) {
  const LoraSpec d = lora_defaults(framework_of(t));
  LoraSpec l = t.lora.value_or(d);
  if (!l.rank) l.rank = d.rank;
  if (!l.targets) l.targets = d.targets;
  if (!l.dropout) l.dropout = d.dropout;
  return l;
}

std::vector<DType> precision_candidates(const TrainingPlan& t, const GpuSpec& gpu) {
  if (!t.precision_auto) return {t.precision};
  if (gpu.peak_fp8_tflops > 0) return {DType::bf16, DType::fp8};
  return {DType::bf16};
}

AttentionKernel default_attention(const TrainingPlan& t, GpuArch arch) {
  // Megatron-LM and NeMo run attention through Transformer Engine, whose DotProductAttention
  // picks cuDNN's FusedAttention from compute capability 9.0 on and FlashAttention below
  // (TransformerEngine v1.4 transformer_engine/pytorch/attention.py: "Select FusedAttention
  // on sm90 and FlashAttention on others for performance"; at 2.x,
  // attention/dot_product_attention/utils.py: device_compute_capability >= (9, 0)); PyTorch
  // stacks call SDPA's FlashAttention-2.
  if (framework_of(t) == Framework::pytorch || arch == GpuArch::ampere) return AttentionKernel::flash2;
  return AttentionKernel::cudnn;
}

AttentionKernel attention_of(const TrainingPlan& t) {
  if (t.attention) return *t.attention;
  return default_attention(t, GpuArch::hopper);
}

int64_t attention_span(const TrainingPlan& t) {
  if (!t.document_tokens || *t.document_tokens <= 0) return t.seq_len;
  return std::min(*t.document_tokens, t.seq_len);
}

std::string_view to_string(TrainMode m) {
  switch (m) {
    case TrainMode::pretrain: return "pretrain";
    case TrainMode::sft: return "sft";
    case TrainMode::lora: return "lora";
    case TrainMode::qlora: return "qlora";
    case TrainMode::ppo: return "ppo";
    case TrainMode::grpo: return "grpo";
    case TrainMode::dpo: return "dpo";
    case TrainMode::simpo: return "simpo";
    case TrainMode::orpo: return "orpo";
    case TrainMode::distill: return "distill";
  }
  return "?";
}

}  // namespace capsim
