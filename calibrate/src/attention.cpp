// Attention suite: cuDNN's fused scaled-dot-product attention (flash attention, backend graph
// API, sdpa.cpp), forward and backward, causal and not; lines carry "impl": "cudnn". Where
// cuDNN cannot build or run a shape, one note goes to stderr and the shape is timed with the
// fallback instead: the GEMMs of attention as cuBLASLt strided-batched matmuls, one matrix per
// (batch, head), with "impl": "cublaslt-bmm" so the fit knows that softmax, masking and dropout
// are not timed and that nothing is fused (a causal fallback line times the full GEMMs).
//
// Row-major Q, O, dO: [seq_q, head_dim]; K, V: [seq_kv, head_dim]; S = P = dS: [seq_q, seq_kv].
// In cuBLASLt's column-major terms (each row-major X is X^T):
//   fwd  S^T  = K  . Q^T   (m=seq_kv,   n=seq_q,  k=head_dim, TN)
//        O^T  = V^T . P^T  (m=head_dim, n=seq_q,  k=seq_kv,   NN)
//   bwd  dV^T = dO^T . P   (m=head_dim, n=seq_kv, k=seq_q,    NT)
//        dP^T = V . dO^T   (m=seq_kv,   n=seq_q,  k=head_dim, TN)
//        dQ^T = K^T . dS^T (m=head_dim, n=seq_q,  k=seq_kv,   NN)
//        dK^T = Q^T . dS   (m=head_dim, n=seq_kv, k=seq_q,    NT)
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "sdpa.hpp"
#include "suites.hpp"

namespace capsim::calibrate {
namespace {

std::vector<SdpaShape> attention_grid(bool quick) {
  std::vector<SdpaShape> out;
  /// 32 heads (Llama-2/3 7B-8B) and 16k tokens per step (batch x seq), as a training micro-batch,
  /// so batch runs 32..2 as seq runs 512..8192 (quick: 1024 and 4096, batch 16 and 4); every seq
  /// is a multiple of 128, the tile the fused backward kernels need without a padding mask.
  constexpr int64_t kHeads = 32;
  constexpr int64_t kTokens = 16384;
  const std::vector<int64_t> seqs = quick ? std::vector<int64_t>{1024, 4096}
                                          : std::vector<int64_t>{512, 1024, 2048, 4096, 8192};
  /// head_dim 64 and 128 cover the common models, 192 the MLA-style (DeepSeek) query/key width.
  const std::vector<int64_t> dims = quick ? std::vector<int64_t>{128} : std::vector<int64_t>{64, 128, 192};
  /// Decode: one query token over a KV cache of 1k..32k, batch 1, 16 and 64 (quick: 1k and 32k
  /// at batch 8, head_dim 128).
  const std::vector<int64_t> kv_lens = quick ? std::vector<int64_t>{1024, 32768}
                                             : std::vector<int64_t>{1024, 2048, 4096, 8192, 16384, 32768};
  const std::vector<int64_t> decode_batches = quick ? std::vector<int64_t>{8} : std::vector<int64_t>{1, 16, 64};
  /// fp16 beside bf16 in full runs only: quick keeps to the type training uses.
  const std::vector<Dtype> dtypes = quick ? std::vector<Dtype>{Dtype::bf16} : std::vector<Dtype>{Dtype::bf16, Dtype::fp16};
  for (const Dtype t : dtypes) {
    for (const int64_t d : dims)
      for (const int64_t s : seqs)
        for (const bool causal : {false, true})
          for (const bool backward : {false, true})
            out.push_back({t, backward, causal, true, std::max<int64_t>(1, kTokens / s), kHeads, d, s, s});
    for (const int64_t d : quick ? std::vector<int64_t>{128} : dims)
      for (const int64_t b : decode_batches)
        for (const int64_t kv : kv_lens) out.push_back({t, false, false, false, b, kHeads, d, 1, kv});
  }
  return out;
}

/// Model FLOPs of the call (docs/calibration.md): QK^T and PV, 4 b h s_q s_kv d, half of it
/// under a causal mask; the backward pass 2.5x the forward. The same for both impls.
double attention_flops(const SdpaShape& a) {
  double f = 4.0 * static_cast<double>(a.batch * a.heads) * static_cast<double>(a.seq_q) *
             static_cast<double>(a.seq_kv) * static_cast<double>(a.head_dim);
  if (a.causal) f *= 0.5;
  return a.backward ? 2.5 * f : f;
}

std::string describe(const SdpaShape& a) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %s%s b=%lld h=%lld d=%lld s_q=%lld s_kv=%lld", dtype_name(a.dtype),
                a.backward ? "bwd" : "fwd", a.causal ? " causal" : "", static_cast<long long>(a.batch),
                static_cast<long long>(a.heads), static_cast<long long>(a.head_dim), static_cast<long long>(a.seq_q),
                static_cast<long long>(a.seq_kv));
  return buf;
}

/// The cuBLASLt stand-in; nullopt (with a note) when it cannot run either.
std::optional<Stats> time_bmm(Context& ctx, const SdpaShape& a) {
  const Dtype t = a.dtype;
  const int64_t bh = a.batch * a.heads, d = a.head_dim, sq = a.seq_q, skv = a.seq_kv;
  std::vector<MatmulShape> shapes;
  if (!a.backward) {
    shapes = {{t, true, false, skv, sq, d, bh}, {t, false, false, d, sq, skv, bh}};
  } else {
    shapes = {{t, false, true, d, skv, sq, bh},
              {t, true, false, skv, sq, d, bh},
              {t, false, false, d, sq, skv, bh},
              {t, false, true, d, skv, sq, bh}};
  }
  size_t bytes = 0;
  for (const auto& sh : shapes) bytes += matmul_bytes(sh);
  if (bytes > usable_memory()) {
    std::fprintf(stderr, "capsim-calibrate: attention %s skipped: %zu bytes do not fit\n", describe(a).c_str(), bytes);
    return std::nullopt;
  }
  std::vector<std::unique_ptr<Matmul>> mms;
  std::string why;
  for (const auto& sh : shapes) {
    mms.push_back(Matmul::create(ctx.lt, sh, ctx.workspace, ctx.workspace_bytes, ctx.stream, &why));
    if (!mms.back()) {
      std::fprintf(stderr, "capsim-calibrate: attention %s skipped: %s\n", describe(a).c_str(), why.c_str());
      cudaGetLastError();
      return std::nullopt;
    }
  }
  return time_launches(
      [&](cudaStream_t stream) {
        for (const auto& mm : mms) mm->run(stream);
      },
      ctx.stream, ctx.timing, ctx.cupti);
}

}  // namespace

bool run_attention(Context& ctx) {
  cudnnHandle_t handle = nullptr;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS || cudnnSetStream(handle, ctx.stream) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "capsim-calibrate: cuDNN unavailable; attention timed with cublaslt-bmm only\n");
    if (handle != nullptr) cudnnDestroy(handle);
    handle = nullptr;
    cudaGetLastError();
  }
  bool ok = true;
  for (const SdpaShape& a : attention_grid(ctx.quick)) {
    if (ctx.compute_capability < min_compute_capability(a.dtype)) continue;
    JsonLine line;
    line.add("kind", "attention")
        .add("pass", a.backward ? "bwd" : "fwd")
        .add("causal", a.causal)
        .add("batch", a.batch)
        .add("heads", a.heads)
        .add("kv_heads", a.heads)
        .add("head_dim", a.head_dim)
        .add("seq_q", a.seq_q)
        .add("seq_kv", a.seq_kv)
        .add("dtype", dtype_name(a.dtype));
    if (ctx.raw->has(line)) continue;
    std::optional<Stats> st;
    const char* impl = "cudnn";
    if (handle != nullptr) {
      std::string why;
      std::unique_ptr<Sdpa> sd;
      if (sdpa_bytes(a) > usable_memory())
        why = "tensors do not fit";
      else
        sd = Sdpa::create(handle, a, ctx.stream, &why);
      if (sd) {
        st = time_launches([&](cudaStream_t stream) { sd->launch(stream); }, ctx.stream, ctx.timing, ctx.cupti);
      } else {
        std::fprintf(stderr, "capsim-calibrate: attention %s: cuDNN fused attention unavailable (%s); timing cublaslt-bmm\n",
                     describe(a).c_str(), why.c_str());
        cudaGetLastError();
      }
    }
    if (!st) {
      impl = "cublaslt-bmm";
      st = time_bmm(ctx, a);
      if (!st) continue;
    }
    line.add("flops", attention_flops(a)).add("impl", impl);
    if (!record(ctx, line, *st)) {
      ok = false;
      break;
    }
  }
  if (handle != nullptr) cudnnDestroy(handle);
  return ok;
}

}  // namespace capsim::calibrate
