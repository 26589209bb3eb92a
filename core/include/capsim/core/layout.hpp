#pragma once
/// Rules a parallel layout must satisfy, and how layers map onto pipeline stages.

#include <cstdint>
#include <vector>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim {

/// Every rule the training layout of `s` breaks, each with its JSON pointer. Fields that
/// are auto are skipped; `resolved` checks run again after resolution.
std::vector<Issue> check_training_layout(const Scenario& s);

/// Whether context parallelism of degree cp can split each packed document (attention_span)
/// into its 2*cp load-balanced chunks: Transformer Engine's THD context parallelism, as
/// Megatron-Bridge pads packed samples to a multiple of 2*cp (pad_seq_to_mult).
bool cp_fits_documents(const TrainingPlan& t, int64_t cp);

/// The layouts a plan with auto layout fields (TrainingPlan::auto_layout) can take on
/// `s.system.num_gpus` GPUs: each auto field over its range (tp: powers of two up to the
/// GPUs of a node; cp: powers of two leaving at least 1,024 tokens a rank; pp: divisors
/// up to the layer count; dp: what the GPU count leaves; ep: divisors of the routed experts
/// that fold into tp*cp*dp; sp: on with tp > 1, as Megatron-LM's and torchtitan's tensor
/// parallelism run it), the fixed fields as given, every candidate passing
/// check_training_layout but for its sequence-length rules (packed sequences are padded to
/// the split), auto bits cleared. The plan itself when nothing is auto.
std::vector<TrainingPlan> layout_candidates(const Scenario& s);

/// Every rule the inference layout of `s` breaks.
std::vector<Issue> check_inference_layout(const Scenario& s);

/// Transformer layers per virtual stage (size `stages`), split as Megatron-LM does when
/// `layers` does not divide: the embedding and the loss count as one layer each
/// (--account-for-embedding/loss-in-pipeline-split), the remainder goes to the middle
/// stages, and the first and last stages are lighter. Precondition: stages <= layers.
/// With `mtp` multi-token prediction modules (which run after the last layer, on the last
/// stage) each module takes the place of one more layer there, as Megatron-LM's flexible
/// layout for DeepSeek-V3 places it ("Et|(tt|)*30mL": embedding, 61 layers in pairs, then
/// the MTP module and the loss alone in the last virtual stage; NVIDIA
/// Megatron-MoE-ModelZoo best-practice/DeepSeekV3/README.md); the last stage may then hold
/// no decoder layer.
std::vector<int64_t> split_layers(int64_t layers, int64_t stages, int64_t mtp = 0);

/// Warm-up plus one: the microbatches (in units of one model chunk) a pipeline rank holds
/// activations for at its peak. 1F1B: min(pp - rank, m) (Narayanan et al. 2021, Sec. 2.2);
/// interleaved: Megatron-LM's warm-up count 2(pp - rank - 1) + (vpp - 1) pp, plus one,
/// capped at m*vpp.
int64_t inflight_chunks(int64_t pp, int64_t vpp, int64_t rank, int64_t microbatches);

/// Forward chunk passes a pipeline rank runs before its first backward under Megatron-Core's
/// batch-level expert-parallel overlap (TrainingPlan::ep_overlap): one more than the
/// schedule's own, since combined_1f1b.py pairs each forward with an earlier microbatch's
/// backward; one without a pipeline. Capped at m*vpp.
int64_t ep_overlap_warmup(int64_t pp, int64_t vpp, int64_t rank, int64_t microbatches);

/// The divisors of n > 0, ascending.
std::vector<int64_t> divisors(int64_t n);

/// Microbatches per step per data-parallel replica: global / (micro * dp).
int64_t num_microbatches(const TrainingPlan& t);

}  // namespace capsim
