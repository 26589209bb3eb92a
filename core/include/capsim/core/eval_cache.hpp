#pragma once
/// An explicit, caller-owned cache for evaluating many layouts of one model: the lowered
/// per-layer activation bytes and per-layer operator costs depend only on a few plan fields
/// (TP, CP, EP, micro batch, recompute, ...), so layouts that share them reuse one lowering.
/// Not thread-safe: give each thread its own. Results are identical with or without it.

#include <memory>

namespace capsim {

class EvalCache {
 public:
  EvalCache();
  ~EvalCache();
  EvalCache(EvalCache&&) noexcept;
  EvalCache& operator=(EvalCache&&) noexcept;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace capsim
