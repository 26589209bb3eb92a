#include "capsim/core/eval_cache.hpp"

#include "eval_cache_impl.hpp"

namespace capsim {

EvalCache::EvalCache() : impl_(std::make_unique<Impl>()) {}
EvalCache::~EvalCache() = default;
EvalCache::EvalCache(EvalCache&&) noexcept = default;
EvalCache& EvalCache::operator=(EvalCache&&) noexcept = default;

}  // namespace capsim
