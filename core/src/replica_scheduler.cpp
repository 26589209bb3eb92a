#include "serving_internal.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace capsim::detail {

ReplicaScheduler::ReplicaScheduler(const SchedulerContext& ctx, Role role)
    : ctx_(ctx), role_(role), free_blocks_(ctx.total_blocks), output_ratio_(ctx.engine.admission_output_ratio_init) {}

bool ReplicaScheduler::accept_transfer(Seq q) {
  const int64_t need = ctx_.engine.reserve_to_completion ? completion_blocks(q) : blocks_for(q.prompt + q.generated + 1);
  if (need > free_blocks_) return false;
  free_blocks_ -= need;
  q.blocks = need;
  running_.push_back(q);
  return true;
}

int64_t ReplicaScheduler::completion_blocks(const Seq& q) const {
  return blocks_for(q.prompt + std::max<int64_t>(q.target, q.generated + 1));
}

IterationBatch ReplicaScheduler::plan(double now) {
  // One batch ahead (TensorRT-LLM's overlap scheduler, SGLang's overlapped event loop): the
  // host schedules batch n+1 right after launching batch n, so when batch n ends a request
  // that arrived while it ran joins batch n+2. A replica that was idle schedules at once.
  const bool ahead = ctx_.engine.host_overlaps_gpu && ran_ && last_end_ == now;
  admit_cutoff_ = ahead ? last_start_ : now;
  IterationBatch batch = plan_batch();
  // Nothing prepared: the host loop comes round at once and takes what has arrived.
  if (batch.decodes == 0 && batch.prefills.empty() && admit_cutoff_ < now) {
    admit_cutoff_ = now;
    batch = plan_batch();
  }
  if (admitted_) decodes_since_prefill_ = 0;
  else if (batch.decodes > 0) ++decodes_since_prefill_;
  return batch;
}

bool ReplicaScheduler::prefill_due() const {
  const EngineDefaults& e = ctx_.engine;
  if (e.prefill_wait_ratio <= 0 && e.prefill_wait_steps <= 0) return true;
  int64_t decoding = 0;
  for (const Seq& q : running_) decoding += q.prefilled >= q.prompt ? 1 : 0;
  if (decoding == 0) return true;
  // TGI counts its waiting tokens from 1 after a prefill and tests before each decode.
  if (e.prefill_wait_steps > 0 && decodes_since_prefill_ + 1 >= e.prefill_wait_steps) return true;
  int64_t queued = 0;
  for (const Seq& q : waiting_) queued += q.queued_at <= admit_cutoff_ ? 1 : 0;
  return dbl(queued) >= std::floor(dbl(decoding) * e.prefill_wait_ratio);
}

IterationBatch ReplicaScheduler::plan_batch() {
  IterationBatch batch;
  admitted_ = false;
  preempted_ = false;
  // SGLang resets its estimate when the scheduler idles.
  if (running_.empty() && swapped_.empty()) output_ratio_ = ctx_.engine.admission_output_ratio_init;
  decoding_.clear();
  prefilling_.clear();
  chunk_of_.clear();
  tokens_of_.clear();
  steps_ = 1;
  int64_t budget = ctx_.engine.max_num_batched_tokens;
  const bool chunked = ctx_.engine.chunked_prefill;
  if (!chunked && ctx_.engine.unchunked_prefill_unbounded) budget = std::numeric_limits<int64_t>::max() / 4;
  const bool can_decode = role_ != Role::prefill;
  const bool can_prefill = role_ != Role::decode;
  // Without chunked prefill, whole prompts either join the decodes' step (TurboMind) or
  // run in a prompt-only step whenever they fit (vLLM V0).
  const bool unchunked_mixed = !chunked && ctx_.engine.unchunked_prefill_with_decodes;
  const bool due = can_prefill && prefill_due();
  const bool prefill_only = !chunked && !unchunked_mixed && due && !waiting_.empty() && prompts_fit(budget);
  swap_in();
  // Multi-step scheduling (vLLM --num-scheduler-steps): with no prompt work to schedule,
  // the decodes run several forward passes per scheduling round, with blocks reserved
  // for every token they will make.
  const int64_t group = ctx_.engine.scheduler_steps;
  bool multi = group > 1 && ctx_.spec.k == 0 && !prefill_only && can_decode && (!chunked || !can_prefill || waiting_.empty());
  for (const Seq& q : running_) multi = multi && q.prefilled >= q.prompt;
  if (multi) steps_ = group;
  // An engine that does not mix prompts into decode batches (SGLang: enable_mixed_chunk
  // off) runs a prefill batch whenever it can form one, and the decodes wait for it (under
  // attention DP, those of the ranks that prefill).
  if (!ctx_.engine.mixed_prefill_decode && chunked && can_prefill && can_decode && steps_ == 1) {
    if (ctx_.dp_ranks > 1) {
      batch = plan_rank_batches(budget, due);
    } else {
      continue_prefills(batch, budget);
      if (due) admit_prompts(batch, budget, chunked);
    }
    if (!batch.prefills.empty()) return batch;
  }
  if (!prefill_only && can_decode) schedule_decodes(batch, budget);
  update_output_ratio(batch);
  // A multi-step round runs decodes only: a sequence its block reservation preempts waits
  // for the round to end.
  if (!prefill_only && chunked && can_prefill && steps_ == 1) continue_prefills(batch, budget);
  if ((chunked || prefill_only || unchunked_mixed) && due && steps_ == 1) admit_prompts(batch, budget, chunked);
  return batch;
}

IterationBatch ReplicaScheduler::plan_rank_batches(int64_t budget, bool due) {
  // SGLang under DP attention: each rank's scheduler forms its own batch (a prefill batch
  // when it has prompt work, else its decodes, an idle batch when it has neither), and the
  // ranks run them as one step, synchronised at the MoE layers
  // (python/sglang/srt/managers/scheduler_components/dp_attn.py, prepare_mlp_sync_batch_raw:
  // each rank's local batch's tokens are gathered, an idle batch only for a rank without
  // one). So a rank with no prompt to prefill decodes while another prefills, at the pace of
  // the prefilling rank. Each rank's prompt budget is its share of the chunked prefill size
  // (rank_tokens).
  IterationBatch batch;
  const size_t ranks = static_cast<size_t>(ctx_.dp_ranks);
  rank_budget_.assign(ranks, ctx_.rank_tokens);
  continue_prefills(batch, budget);
  if (due) admit_prompts(batch, budget, true);
  rank_budget_.clear();
  if (batch.prefills.empty()) return batch;
  std::vector<int64_t> prompt_tokens(ranks, 0);
  for (size_t j = 0; j < prefilling_.size(); ++j) prompt_tokens[static_cast<size_t>(running_[prefilling_[j]].rank)] += chunk_of_[j];
  // The ranks that prefill (every chunk has tokens) run no decodes: the busiest rank is the
  // one with the most prompt tokens.
  batch.busiest_rank_prompt_tokens = *std::max_element(prompt_tokens.begin(), prompt_tokens.end());
  int64_t decode_budget = ctx_.engine.max_num_batched_tokens;
  schedule_decodes(batch, decode_budget, &prompt_tokens);
  return batch;
}

bool ReplicaScheduler::prompts_fit(int64_t budget) const {
  int64_t seqs = static_cast<int64_t>(running_.size());
  int64_t need_tokens = 0, need_blocks = 0;
  for (const Seq& q : waiting_) {
    if (q.queued_at > admit_cutoff_) break;
    const int64_t b = std::max<int64_t>(
        0, (ctx_.engine.reserve_to_completion ? completion_blocks(q) : blocks_for(q.prompt + 1)) - q.blocks);
    if (seqs + 1 > ctx_.engine.max_num_seqs || need_tokens + q.prompt > budget || need_blocks + b > free_blocks_) break;
    ++seqs;
    need_tokens += q.prompt;
    need_blocks += b;
  }
  return need_tokens > 0;
}

void ReplicaScheduler::swap_in() {
  // Swapped sequences come back first, oldest first, when their blocks fit again.
  while (!swapped_.empty() && swapped_.front().blocks <= free_blocks_ &&
         static_cast<int64_t>(running_.size()) < ctx_.engine.max_num_seqs) {
    Seq q = swapped_.front();
    swapped_.pop_front();
    free_blocks_ -= q.blocks;
    swapped_bytes_ -= dbl(q.blocks) * ctx_.block_bytes;
    swap_s_ += dbl(q.blocks) * ctx_.block_bytes / ctx_.pcie_bytes_per_s;
    running_.push_back(q);
  }
}

int64_t ReplicaScheduler::blocks_for(int64_t tokens) const {
  const int64_t bs = ctx_.block_size;
  const int64_t all = ceil_div(tokens, bs);
  const double share = ctx_.window_layer_share;
  if (share <= 0.0) return all;
  // A block holds bs tokens of every layer. A layer with a sliding window keeps only the
  // window's tokens, plus the block the window's oldest token opens (vLLM's hybrid KV cache
  // manager frees the blocks wholly outside the window): its share of the layers holds
  // those blocks, the rest every token's.
  const int64_t window = ceil_div(std::min(tokens, ctx_.sliding_window + bs - 1), bs);
  return static_cast<int64_t>(std::ceil((1.0 - share) * dbl(all) + share * dbl(window) - 1e-9));
}

void ReplicaScheduler::add_window_context(IterationBatch& batch, int64_t context) const {
  if (ctx_.sliding_window <= 0) return;
  batch.context_window = ctx_.sliding_window;
  batch.decode_window_context += dbl(std::min(context, ctx_.sliding_window));
}

void ReplicaScheduler::schedule_decodes(IterationBatch& batch, int64_t& budget, const std::vector<int64_t>* rank_prompt_tokens) {
  // Decodes first; a sequence that needs a new block and finds none preempts another
  // (preempt_newest).
  for (size_t k = 0; k < running_.size(); ++k) {
    Seq& q = running_[k];
    if (q.prefilled < q.prompt) continue;
    if (rank_prompt_tokens && (*rank_prompt_tokens)[static_cast<size_t>(q.rank)] > 0) continue;
    const int64_t ctx = q.prompt + q.generated;
    const int64_t make = std::min(steps_, q.target - q.generated);
    bool waits = false;
    while (blocks_for(ctx + make) > q.blocks) {
      // A preempted sequence's blocks are the prefix cache's oldest eviction candidates.
      if (ctx_.engine.preemption == Preemption::cached && reclaim_waiting_block(0)) {
        --free_blocks_;
        ++q.blocks;
        continue;
      }
      if (free_blocks_ > 0) {
        --free_blocks_;
        ++q.blocks;
        continue;
      }
      if (rank_prompt_tokens) {
        waits = true;
        break;
      }
      // Under partial preemption a stopped sequence's blocks go next: it ranks below every
      // running one.
      if (reclaim_waiting_block(0)) continue;
      if (ctx_.engine.preempt_fewest_outputs) move_fewest_outputs_last(k + 1);
      preempt_newest();
      if (k >= running_.size()) break;
    }
    if (waits) continue;
    if (k >= running_.size()) break;
    if (budget <= 0) break;
    decoding_.push_back(k);
    tokens_of_.push_back(make);
    batch.decodes += 1;
    batch.decode_context += dbl(ctx);
    add_window_context(batch, ctx);
    budget -= 1;
  }
}

void ReplicaScheduler::move_fewest_outputs_last(size_t from) {
  // Among the decoding sequences from `from` on (those not yet scheduled this step), the one
  // that has made the fewest tokens, the longer prompt among equals, goes last; the others
  // keep their order.
  size_t pick = running_.size() - 1;
  for (size_t j = from; j < running_.size(); ++j) {
    const Seq& a = running_[j];
    const Seq& b = running_[pick];
    if (a.prefilled < a.prompt) continue;
    if (b.prefilled < b.prompt || a.generated < b.generated || (a.generated == b.generated && a.prompt > b.prompt))
      pick = j;
  }
  std::rotate(running_.begin() + static_cast<std::ptrdiff_t>(pick), running_.begin() + static_cast<std::ptrdiff_t>(pick) + 1,
              running_.end());
}

void ReplicaScheduler::update_output_ratio(const IterationBatch& batch) {
  const EngineDefaults& e = ctx_.engine;
  if (e.admission_output_ratio_init <= 0) return;
  if (preempted_) {
    // SGLang's estimate after a retraction: what the sequences left have made, plus a few
    // steps each, over what they were asked for.
    double made = 0, asked = 0;
    for (const Seq& q : running_) {
      made += dbl(q.generated + e.retract_decode_steps);
      asked += dbl(q.target);
    }
    output_ratio_ = std::min(1.0, made / (asked + 1.0));
  } else if (batch.decodes > 0) {
    const double step = (e.admission_output_ratio_init - e.admission_output_ratio_min) /
                        std::max(1.0, e.admission_output_ratio_decay_steps);
    output_ratio_ = std::max(output_ratio_ - step, e.admission_output_ratio_min);
  }
}

double ReplicaScheduler::estimated_free_tokens() const {
  double reserved = 0;
  for (const Seq& q : running_)
    reserved += dbl(std::min(std::max<int64_t>(0, q.target - q.generated), ctx_.engine.admission_output_clip)) *
                output_ratio_;
  return dbl(free_blocks_) * dbl(ctx_.block_size) - reserved;
}

bool ReplicaScheduler::reclaim_waiting_block(size_t after) {
  if (waiting_holders_ == 0) return false;
  // The lowest-ranked stopped sequence that still holds blocks gives up its newest one.
  // Stopped sequences queue at the head, so the scan ends at the last holder.
  size_t pick = waiting_.size();
  int64_t seen = 0;
  for (size_t i = 0; i < waiting_.size() && seen < waiting_holders_; ++i) {
    if (waiting_[i].blocks <= 0) continue;
    ++seen;
    if (i >= after) pick = i;
  }
  if (pick == waiting_.size()) return false;
  Seq& q = waiting_[pick];
  --q.blocks;
  ++free_blocks_;
  if (q.blocks == 0) --waiting_holders_;
  q.prefilled = std::min(q.prefilled, q.blocks * ctx_.block_size);
  return true;
}

void ReplicaScheduler::preempt_newest() {
  // Swapped to host memory when the engine swaps and the swap space holds it, else
  // recomputed (its tokens rejoin the prompt, back to the queue); under partial or cached
  // preemption it waits at the head of the queue with its blocks, which the sequences that
  // need them take from it one at a time, newest first (reclaim_waiting_block).
  Seq victim = running_.back();
  running_.pop_back();
  ctx_.requests[victim.req].preemptions += 1;
  ++ctx_.preemptions;
  preempted_ = true;
  const bool keeps = ctx_.engine.preemption == Preemption::partial || ctx_.engine.preemption == Preemption::cached;
  if (keeps && role_ != Role::decode) {
    // The tokens whose keys and values are cached: the prompt's prefilled part, or, once
    // it decodes, every token but the last one made (the next step's input).
    const int64_t cached = victim.generated > 0 ? victim.prompt + victim.generated - 1 : victim.prefilled;
    victim.prompt += victim.generated;
    victim.target -= victim.generated;
    victim.generated = 0;
    victim.prefilled = std::min(cached, victim.blocks * ctx_.block_size);
    if (victim.blocks > 0) ++waiting_holders_;
    waiting_.push_front(victim);
    return;
  }
  free_blocks_ += victim.blocks;
  const double victim_bytes = dbl(victim.blocks) * ctx_.block_bytes;
  if (ctx_.engine.preemption == Preemption::swap && swapped_bytes_ + victim_bytes <= ctx_.engine.swap_space_bytes) {
    swapped_bytes_ += victim_bytes;
    swap_s_ += victim_bytes / ctx_.pcie_bytes_per_s;
    swapped_.push_back(victim);
    return;
  }
  victim.blocks = 0;
  victim.prefilled = 0;
  victim.prompt += victim.generated;
  victim.target -= victim.generated;
  victim.generated = 0;
  // A decode-only replica cannot prefill it again: it rejoins the prefill pool.
  if (role_ == Role::decode) ctx_.requeue_for_prefill(victim);
  else waiting_.push_front(victim);
}

void ReplicaScheduler::continue_prefills(IterationBatch& batch, int64_t& budget) {
  for (size_t k = 0; k < running_.size() && budget > 0; ++k) {
    Seq& q = running_[k];
    if (q.prefilled >= q.prompt) continue;
    int64_t c = std::min({q.prompt - q.prefilled, budget, ctx_.rank_tokens});
    if (!rank_budget_.empty()) c = std::min(c, rank_budget_[static_cast<size_t>(q.rank)]);
    if (c <= 0) continue;
    const int64_t need = blocks_for(q.prefilled + c + (q.prefilled + c == q.prompt ? 1 : 0)) - q.blocks;
    if (need > free_blocks_) continue;
    if (!rank_budget_.empty()) rank_budget_[static_cast<size_t>(q.rank)] -= c;
    free_blocks_ -= std::max<int64_t>(0, need);
    q.blocks += std::max<int64_t>(0, need);
    prefilling_.push_back(k);
    chunk_of_.push_back(c);
    batch.prefills.push_back({c, q.prefilled, q.prefilled + c == q.prompt});
    budget -= c;
  }
}

void ReplicaScheduler::admit_prompts(IterationBatch& batch, int64_t& budget, bool chunked) {
  const int64_t bs = ctx_.block_size;
  // With per-rank budgets every attention-DP rank takes prompts from its own queue in order:
  // a rank whose budget is spent, or whose first prompt does not fit, leaves the others be.
  const bool ranked = !rank_budget_.empty();
  std::vector<char> stopped(ranked ? rank_budget_.size() : 0, 0);
  // Admission by estimated future tokens (SGLang): each prompt must fit with all its output
  // tokens in what the running sequences' estimated outputs leave.
  const bool estimated = ctx_.engine.admission_output_ratio_init > 0;
  double estimate_left = estimated ? estimated_free_tokens() : 0.0;
  size_t i = 0;
  // New prompts wait while swapped sequences do (vLLM V0 schedules swapped-in first).
  while (swapped_.empty() && i < waiting_.size() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < ctx_.engine.max_num_seqs) {
    Seq q = waiting_[i];
    if (q.queued_at > admit_cutoff_) break;
    const size_t r = static_cast<size_t>(q.rank);
    if (ranked && (stopped[r] || rank_budget_[r] <= 0)) {
      ++i;
      continue;
    }
    if (q.prefilled == 0 && ctx_.prefix_hit_rate > 0 && ctx_.requests[q.req].preemptions == 0)
      q.prefilled = std::min(q.prompt - 1, static_cast<int64_t>(std::floor(ctx_.prefix_hit_rate * dbl(q.prompt) / dbl(bs))) * bs);
    int64_t c = chunked ? std::min({q.prompt - q.prefilled, budget, ctx_.rank_tokens}) : q.prompt - q.prefilled;
    if (ranked) c = std::min(c, rank_budget_[r]);
    if (!chunked && c > budget) break;
    const double future =
        dbl(q.prompt - q.prefilled) +
        dbl(std::min(std::max<int64_t>(0, q.target - q.generated), ctx_.engine.admission_output_clip));
    // (With nothing running there is nothing to reserve for; a prompt that the blocks
    // stopped sequences hold keep out takes them below.)
    if (estimated && !running_.empty() && future + dbl(bs) >= estimate_left) break;
    const bool ends = q.prefilled + c == q.prompt;
    // Reserving to completion takes the blocks of the whole prompt and every output
    // token up front; otherwise the blocks of this chunk (and the first output token),
    // less those a sequence stopped by partial preemption still holds. Under partial
    // preemption the blocks of stopped sequences ranked below it are taken where needed.
    const int64_t want = ctx_.engine.reserve_to_completion ? completion_blocks(q) : blocks_for(q.prefilled + c + (ends ? 1 : 0));
    const int64_t need = std::max<int64_t>(0, want - q.blocks);
    while (need > free_blocks_ && reclaim_waiting_block(i + 1)) {
    }
    if (need > free_blocks_) {
      if (!ranked) break;
      stopped[r] = 1;
      ++i;
      continue;
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    if (q.blocks > 0) --waiting_holders_;
    if (estimated) estimate_left -= future;
    if (ranked) rank_budget_[r] -= c;
    admitted_ = true;
    free_blocks_ -= need;
    q.blocks += need;
    batch.prefills.push_back({c, q.prefilled, ends});
    running_.push_back(q);
    prefilling_.push_back(running_.size() - 1);
    chunk_of_.push_back(c);
    budget -= c;
  }
}

double ReplicaScheduler::take_swap_seconds() {
  const double s = swap_s_;
  swap_s_ = 0;
  return s;
}

IterationBatch ReplicaScheduler::pass(int64_t step) const {
  IterationBatch batch;
  for (size_t j = 0; j < decoding_.size(); ++j) {
    if (tokens_of_[j] <= step) continue;
    const Seq& q = running_[decoding_[j]];
    batch.decodes += 1;
    batch.decode_context += dbl(q.prompt + q.generated + step);
    add_window_context(batch, q.prompt + q.generated + step);
  }
  return batch;
}

int64_t ReplicaScheduler::round_tokens() const {
  int64_t made = 0;
  for (int64_t k : tokens_of_) made += k;
  return made;
}

void ReplicaScheduler::start(double now, double until) {
  busy_ = true;
  busy_until_ = until;
  ran_ = true;
  last_start_ = now;
}

size_t ReplicaScheduler::finish(double now, std::vector<Transfer>& handoffs) {
  busy_ = false;
  last_end_ = now;
  emit_decodes(now);
  advance_prefills(now);
  return retire(now, handoffs);
}

void ReplicaScheduler::emit_decodes(double now) {
  for (size_t j = 0; j < decoding_.size(); ++j) {
    Seq& q = running_[decoding_[j]];
    // Tokens this step: one, or the expected accepted drafts plus the bonus token,
    // emitted as whole tokens as their running sum allows (deterministic).
    int64_t emit = tokens_of_[j];
    if (ctx_.spec.k > 0) {
      q.accepted += ctx_.per_verify;
      emit = std::max<int64_t>(1, static_cast<int64_t>(std::floor(q.accepted + 1e-9)));
      emit = std::min(emit, q.target - q.generated);
      q.accepted = std::max(0.0, q.accepted - dbl(emit));
    }
    // The tokens of one iteration stream as one chunk: one inter-token gap, as benchmark
    // clients (vLLM benchmark_serving, sglang.bench_serving) record it per chunk.
    record_gap(q.req, now - q.last_token);
    q.generated += emit;
    q.last_token = now;
  }
}

void ReplicaScheduler::advance_prefills(double now) {
  for (size_t j = 0; j < prefilling_.size(); ++j) {
    Seq& q = running_[prefilling_[j]];
    q.prefilled += chunk_of_[j];
    if (q.prefilled == q.prompt && q.generated == 0) {
      q.generated = 1;
      RequestResult& r = ctx_.requests[q.req];
      if (r.first_token == 0) r.first_token = now;
      else record_gap(q.req, now - q.last_token);  // resumed after a preemption
      q.last_token = now;
    }
  }
}

size_t ReplicaScheduler::retire(double now, std::vector<Transfer>& handoffs) {
  // Retire finished sequences; hand finished prefills to the decode pool.
  size_t completed = 0;
  for (size_t k = 0; k < running_.size();) {
    Seq& q = running_[k];
    const bool complete = q.prefilled == q.prompt && q.generated >= q.target;
    const bool handoff = !complete && role_ == Role::prefill && q.prefilled == q.prompt;
    if (complete || handoff) {
      free_blocks_ += q.blocks;
      if (complete) {
        ctx_.requests[q.req].finish = now;
        ++completed;
      } else {
        // The prompt's KV moves to a decode replica, each GPU sending its shard (of the
        // windowed layers, the window's where the engine caches only that).
        double bytes = dbl(q.prompt) * ctx_.kv_bytes_per_token;
        if (const double share = ctx_.window_layer_share; share > 0.0)
          bytes = ((1.0 - share) * dbl(q.prompt) + share * dbl(std::min(q.prompt, ctx_.sliding_window))) *
                  ctx_.kv_bytes_per_token;
        Seq moved = q;
        moved.blocks = 0;
        handoffs.push_back({now + ctx_.cost.p2p(Bytes(bytes), ctx_.kv_transfer_over_network).value, moved});
      }
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    ++k;
  }
  return completed;
}

Router::Router(InferencePlan::Router policy, const std::vector<ReplicaScheduler>& replicas)
    : policy_(policy), replicas_(replicas) {}

size_t Router::route(bool to_decode) {
  using Role = ReplicaScheduler::Role;
  std::vector<size_t> pool;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const auto role = replicas_[i].role();
    if (role == Role::both || (to_decode ? role == Role::decode : role == Role::prefill)) pool.push_back(i);
  }
  if (policy_ == InferencePlan::Router::least_outstanding) {
    size_t best = pool.front();
    for (size_t i : pool)
      if (replicas_[i].outstanding() < replicas_[best].outstanding()) best = i;
    return best;
  }
  return pool[cursor_[to_decode ? 1 : 0]++ % pool.size()];
}

}  // namespace capsim::detail
