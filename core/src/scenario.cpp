#include "capsim/core/scenario.hpp"

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

Framework framework_of(const TrainingPlan& t) {
  if (t.framework) return *t.framework;
  return t.zero.value_or(0) >= 3 ? Framework::pytorch : Framework::megatron;
}

AttentionKernel attention_of(const TrainingPlan& t) {
  if (t.attention) return *t.attention;
  return framework_of(t) == Framework::pytorch ? AttentionKernel::flash2 : AttentionKernel::fused;
}

std::string_view to_string(TrainMode m) {
  switch (m) {
    case TrainMode::pretrain: return "pretrain";
    case TrainMode::sft: return "sft";
    case TrainMode::lora: return "lora";
  }
  return "?";
}

}  // namespace capsim
