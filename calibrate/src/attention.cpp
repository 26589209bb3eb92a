// Attention suite, fallback implementation: the GEMMs of scaled dot-product attention as
// cuBLASLt strided-batched matmuls, one matrix per (batch, head). Lines carry
// "impl": "cublaslt-bmm" so the fit knows that softmax, masking and dropout are not timed and
// that nothing is fused. cuDNN's fused SDPA (backend graph API) is not built yet.
//
// Row-major Q, K, V, O, dO: [seq, head_dim]; S = P = dS: [seq_q, seq_kv]. In cuBLASLt's
// column-major terms (each row-major X is X^T):
//   fwd  S^T  = K  . Q^T   (m=seq_kv,   n=seq_q,  k=head_dim, TN)
//        O^T  = V^T . P^T  (m=head_dim, n=seq_q,  k=seq_kv,   NN)
//   bwd  dV^T = dO^T . P   (m=head_dim, n=seq_kv, k=seq_q,    NT)
//        dP^T = V . dO^T   (m=seq_kv,   n=seq_q,  k=head_dim, TN)
//        dQ^T = K^T . dS^T (m=head_dim, n=seq_q,  k=seq_kv,   NN)
//        dK^T = Q^T . dS   (m=head_dim, n=seq_kv, k=seq_q,    NT)
#include <cstdio>
#include <memory>

#include "suites.hpp"

namespace capsim::calibrate {
namespace {

struct AttentionShape {
  int64_t batch;
  int64_t heads;
  int64_t head_dim;
  int64_t seq;
};

std::vector<AttentionShape> attention_grid(bool quick) {
  /// 32 heads (Llama-2/3 7B-8B) and 16k tokens per step (batch x seq), as a training micro-batch;
  /// head_dim 64 and 128 cover the common models; seq 512..8192 (quick: 1024 and 4096).
  constexpr int64_t kHeads = 32;
  constexpr int64_t kTokens = 16384;
  const std::vector<int64_t> seqs = quick ? std::vector<int64_t>{1024, 4096}
                                          : std::vector<int64_t>{512, 1024, 2048, 4096, 8192};
  const std::vector<int64_t> dims = quick ? std::vector<int64_t>{128} : std::vector<int64_t>{64, 128};
  std::vector<AttentionShape> out;
  for (const int64_t d : dims)
    for (const int64_t s : seqs) out.push_back({std::max<int64_t>(1, kTokens / s), kHeads, d, s});
  return out;
}

}  // namespace

bool run_attention(Context& ctx) {
  for (const Dtype dtype : {Dtype::bf16, Dtype::fp16}) {
    if (ctx.compute_capability < min_compute_capability(dtype)) continue;
    for (const AttentionShape& a : attention_grid(ctx.quick)) {
      for (const bool backward : {false, true}) {
        JsonLine line;
        line.add("kind", "attention")
            .add("pass", backward ? "bwd" : "fwd")
            .add("causal", false)
            .add("batch", a.batch)
            .add("heads", a.heads)
            .add("kv_heads", a.heads)
            .add("head_dim", a.head_dim)
            .add("seq_q", a.seq)
            .add("seq_kv", a.seq)
            .add("dtype", dtype_name(dtype));
        if (ctx.raw->has(line)) continue;
        const int64_t bh = a.batch * a.heads;
        const int64_t d = a.head_dim;
        const int64_t s = a.seq;
        std::vector<MatmulShape> shapes;
        if (!backward) {
          shapes = {{dtype, true, false, s, s, d, bh}, {dtype, false, false, d, s, s, bh}};
        } else {
          shapes = {{dtype, false, true, d, s, s, bh},
                    {dtype, true, false, s, s, d, bh},
                    {dtype, false, false, d, s, s, bh},
                    {dtype, false, true, d, s, s, bh}};
        }
        size_t bytes = 0;
        for (const auto& sh : shapes) bytes += matmul_bytes(sh);
        if (bytes > usable_memory()) continue;
        std::vector<std::unique_ptr<Matmul>> mms;
        std::string why;
        for (const auto& sh : shapes) {
          mms.push_back(Matmul::create(ctx.lt, sh, ctx.workspace, ctx.workspace_bytes, ctx.stream, &why));
          if (!mms.back()) break;
        }
        if (!mms.back()) {
          std::fprintf(stderr, "capsim-calibrate: attention %s seq %lld skipped: %s\n", dtype_name(dtype),
                       static_cast<long long>(s), why.c_str());
          cudaGetLastError();
          continue;
        }
        const Stats st = time_launches(
            [&](cudaStream_t stream) {
              for (const auto& mm : mms) mm->run(stream);
            },
            ctx.stream, ctx.timing, ctx.cupti);
        // Executed GEMM flops: 2 per multiply-add, each GEMM bh * seq_q * seq_kv * head_dim.
        const double per_gemm = 2.0 * static_cast<double>(bh) * static_cast<double>(s) * static_cast<double>(s) *
                                 static_cast<double>(d);
        line.add("flops", per_gemm * static_cast<double>(shapes.size())).add("impl", "cublaslt-bmm");
        if (!record(ctx, line, st)) return false;
      }
    }
  }
  return true;
}

}  // namespace capsim::calibrate
