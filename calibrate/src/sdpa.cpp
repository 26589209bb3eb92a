// cuDNN fused attention through the backend graph API. The graphs follow the operation
// pattern cuDNN's fused flash-attention engines match (the same one cudnn-frontend's SDPA node
// lowers to for cuDNN < 9.21):
//   fwd  S = Q.K^T * scale [causal: select(row >= col, S, lowest)]; M = max_row(S);
//        E = exp(S - M); Z = sum_row(E); Stats = M + log(Z); P = E / Z (I/O type); O = P.V
//   bwd  softmax_sum = sum_row(dO * O); E = exp(Q.K^T * scale - Stats) [masked];
//        dV = E^T.dO; dS = (dO.V^T - softmax_sum) * E * scale; dK = dS^T.Q;
//        dQ = identity(dS.K accumulated in fp32)
// Q, K, V, O and their gradients are [b, s, h, d] in memory (what a fused QKV projection
// gives), described to cuDNN as [b, h, s, d] with strides; K and V enter the matmuls as
// transposed views. Statistics are fp32 [b, h, s_q, 1].
#include "sdpa.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "timing.hpp"

namespace capsim::calibrate {

using Dims = std::array<int64_t, 4>;

namespace {

Dims packed(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }
/// [b, h, s, d] dims over [b, s, h, d] memory.
Dims bshd(int64_t h, int64_t s, int64_t d) { return {s * h * d, d, h * d, 1}; }
/// [b, h, d, s] dims (a transposed view) over [b, s, h, d] memory.
Dims bshd_t(int64_t h, int64_t s, int64_t d) { return {s * h * d, d, 1, h * d}; }
int64_t elems(const Dims& d) { return d[0] * d[1] * d[2] * d[3]; }

}  // namespace

size_t sdpa_bytes(const SdpaShape& s) {
  const auto q = static_cast<size_t>(s.batch * s.heads * s.seq_q * s.head_dim);
  const auto kv = static_cast<size_t>(s.batch * s.heads * s.seq_kv * s.head_dim);
  const auto rows = static_cast<size_t>(s.batch * s.heads * s.seq_q);
  if (!s.backward) return 2 * (2 * q + 2 * kv) + (s.stats ? 4 * rows : 0);
  // Q, O, dO, dQ and K, V, dK, dV in 16 bits; Stats, softmax_sum and the fp32 dQ accumulator.
  return 2 * (4 * q + 4 * kv) + 4 * (2 * rows + q);
}

/// A tensor descriptor of the graph and its unique id; a null `d` stands for "absent".
struct SdpaTensor {
  cudnnBackendDescriptor_t d = nullptr;
  int64_t uid = 0;
};

/// Builds one graph into an Sdpa; the first failure is kept in `why` and stops the rest.
class SdpaBuilder {
 public:
  using T = SdpaTensor;

  SdpaBuilder(Sdpa* out, cudnnHandle_t handle, cudaStream_t stream) : out_(out), handle_(handle), stream_(stream) {}

  bool build(const SdpaShape& s);
  const std::string& why() const { return why_; }

 private:
  bool check(cudnnStatus_t st, const char* what) {
    if (st != CUDNN_STATUS_SUCCESS && why_.empty()) why_ = std::string(what) + ": " + cudnnGetErrorString(st);
    return st == CUDNN_STATUS_SUCCESS;
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!why_.empty() || !check(cudnnBackendCreateDescriptor(type, &d), "cudnnBackendCreateDescriptor")) return nullptr;
    out_->descs_.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
           const void* v) {
    if (why_.empty() && d != nullptr) check(cudnnBackendSetAttribute(d, a, t, n, v), "cudnnBackendSetAttribute");
  }
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, const T& x) {
    set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (why_.empty() && d != nullptr) check(cudnnBackendFinalize(d), what);
  }

  T tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual, bool by_value = false) {
    T t{make(CUDNN_BACKEND_TENSOR_DESCRIPTOR), next_uid_++};
    /// 16-byte alignment: what cudaMalloc (256 B) and host scalars satisfy; cuDNN's kernels
    /// want vectorised 16-byte loads.
    const int64_t alignment = 16;
    set(t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid);
    set(t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(t.d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(t.d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(t.d, "tensor");
    return t;
  }
  /// An fp32 intermediate (or `type`) in packed layout, never in memory.
  T virt(const Dims& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) { return tensor(type, dims, packed(dims), true); }
  /// A tensor in device memory; `fill`: fill_values kind, or -1 to leave it as allocated.
  T data(cudnnDataType_t type, const Dims& dims, const Dims& strides, int fill) {
    const T t = tensor(type, dims, strides, false);
    const size_t bytes = static_cast<size_t>(elems(dims)) * (type == CUDNN_DATA_FLOAT ? 4 : 2);
    void* p = nullptr;
    if (!why_.empty()) return t;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      why_ = "out of device memory";
      return t;
    }
    out_->buffers_.push_back(p);
    if (fill >= 0) fill_values(p, static_cast<size_t>(elems(dims)), fill, stream_);
    uids_.push_back(t.uid);
    ptrs_.push_back(p);
    return t;
  }
  /// An fp32 scalar passed by value from host memory.
  T scalar(float value) {
    const T t = tensor(CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
    /// Four floats (16 bytes) per slot, so each host scalar meets the declared 16-byte alignment.
    float* slot = &out_->scalars_[static_cast<size_t>(4 * n_scalars_++)];
    *slot = value;
    uids_.push_back(t.uid);
    ptrs_.push_back(slot);
    return t;
  }

  void op(cudnnBackendDescriptor_t o, const char* what) {
    finalize(o, what);
    ops_.push_back(o);
  }
  void pointwise(cudnnPointwiseMode_t mode, const T& y, const T& x, const T& b = {}, const T& t = {},
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "pointwise descriptor");
    cudnnBackendDescriptor_t o = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b.d != nullptr) set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t.d != nullptr) set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    op(o, "pointwise operation");
  }
  void matmul(const T& a, const T& b, const T& c) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(mm, "matmul descriptor");
    cudnnBackendDescriptor_t o = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    op(o, "matmul operation");
  }
  void reduction(cudnnReduceTensorOp_t mode, const T& x, const T& y) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(rd, "reduction descriptor");
    cudnnBackendDescriptor_t o = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    op(o, "reduction operation");
  }
  void reshape(const T& x, const T& y) {
    cudnnBackendDescriptor_t o = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(o, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(o, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op(o, "reshape operation");
  }
  /// Top-left causal mask on scores `x` [b, h, s_q, s_kv]: keeps row >= column.
  T causal_mask(const T& x, const Dims& dims, const T& lowest) {
    const T row = virt(dims, CUDNN_DATA_INT32);
    const T col = virt(dims, CUDNN_DATA_INT32);
    const T keep = virt(dims, CUDNN_DATA_BOOLEAN);
    const T y = virt(dims);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, row, x, {}, {}, CUDNN_DATA_INT32, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, col, x, {}, {}, CUDNN_DATA_INT32, 3);
    pointwise(CUDNN_POINTWISE_CMP_GE, keep, row, col, {}, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, y, x, lowest, keep);
    return y;
  }

  bool plan();

  Sdpa* out_;
  cudnnHandle_t handle_;
  cudaStream_t stream_;
  std::string why_;
  int64_t next_uid_ = 1;
  int n_scalars_ = 0;
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::vector<int64_t> uids_;
  std::vector<void*> ptrs_;
};

bool SdpaBuilder::build(const SdpaShape& s) {
  if (s.dtype != Dtype::bf16 && s.dtype != Dtype::fp16) {
    why_ = "fused attention is built for bf16 and fp16 only";
    return false;
  }
  const cudnnDataType_t io = s.dtype == Dtype::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const int fill = s.dtype == Dtype::bf16 ? 1 : 2;
  const int64_t b = s.batch, h = s.heads, d = s.head_dim, sq = s.seq_q, skv = s.seq_kv;
  const Dims scores{b, h, sq, skv};
  const Dims rows{b, h, sq, 1};
  /// Three by-value scalars at most: scale, the mask value and (backward) 1.0.
  out_->scalars_ = std::make_unique<float[]>(3 * 4);
  const T scale = scalar(static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))));
  /// Masked scores take the lowest finite float, as cudnn-frontend does: exp() of it is 0, and
  /// unlike -inf it gives no NaN when a whole row (or tile) is masked.
  const T lowest = s.causal ? scalar(std::numeric_limits<float>::lowest()) : T{};
  const T q = data(io, {b, h, sq, d}, bshd(h, sq, d), fill);
  const T kt = data(io, {b, h, d, skv}, bshd_t(h, skv, d), fill);

  if (!s.backward) {
    const T v = data(io, {b, h, skv, d}, bshd(h, skv, d), fill);
    const T o = data(io, {b, h, sq, d}, bshd(h, sq, d), -1);
    const T qk = virt(scores), scaled = virt(scores), sub = virt(scores), e = virt(scores);
    const T mx = virt(rows), sum = virt(rows);
    matmul(q, kt, qk);
    pointwise(CUDNN_POINTWISE_MUL, scaled, qk, scale);
    const T masked = s.causal ? causal_mask(scaled, scores, lowest) : scaled;
    reduction(CUDNN_REDUCE_TENSOR_MAX, masked, mx);
    pointwise(CUDNN_POINTWISE_SUB, sub, masked, mx);
    pointwise(CUDNN_POINTWISE_EXP, e, sub);
    reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
    if (s.stats) {
      const T log_sum = virt(rows);
      const T stats = data(CUDNN_DATA_FLOAT, rows, packed(rows), -1);
      pointwise(CUDNN_POINTWISE_LOG, log_sum, sum);
      pointwise(CUDNN_POINTWISE_ADD, stats, mx, log_sum);
    }
    // The second matmul takes P in the I/O type (a requirement of the fused engines).
    const T p = virt(scores, io);
    pointwise(CUDNN_POINTWISE_DIV, p, e, sum);
    matmul(p, v, o);
    return plan();
  }

  const T one = scalar(1.0f);
  const T vt = data(io, {b, h, d, skv}, bshd_t(h, skv, d), fill);
  const T o = data(io, {b, h, sq, d}, bshd(h, sq, d), fill);
  const T d_o = data(io, {b, h, sq, d}, bshd(h, sq, d), fill);
  const T stats = data(CUDNN_DATA_FLOAT, rows, packed(rows), 0);
  const T dq = data(io, {b, h, sq, d}, bshd(h, sq, d), -1);
  const T dk = data(io, {b, h, skv, d}, bshd(h, skv, d), -1);
  const T dv = data(io, {b, h, skv, d}, bshd(h, skv, d), -1);
  // Scratch the fused kernel needs in memory: the row sums of dO*O and the fp32 dQ accumulator.
  const T softmax_sum = data(CUDNN_DATA_FLOAT, rows, packed(rows), -1);
  const T dq_accum = data(CUDNN_DATA_FLOAT, {b, h, sq, d}, packed({b, h, sq, d}), -1);
  /// cuDNN 9.6 (90600) and later clear the dQ accumulator themselves; earlier ones need it zeroed.
  if (why_.empty() && cudnnGetVersion() < 90600) {
    out_->zero_ = ptrs_.back();
    out_->zero_bytes_ = static_cast<size_t>(b * h * sq * d) * 4;
  }

  const T dpo = virt({b, h, sq, d}), row_sum = virt(rows);
  pointwise(CUDNN_POINTWISE_MUL, dpo, d_o, o);
  reduction(CUDNN_REDUCE_TENSOR_ADD, dpo, row_sum);
  pointwise(CUDNN_POINTWISE_MUL, softmax_sum, row_sum, one);

  const T qk = virt(scores), scaled = virt(scores), centred = virt(scores), e = virt(scores);
  matmul(q, kt, qk);
  pointwise(CUDNN_POINTWISE_MUL, scaled, qk, scale);
  pointwise(CUDNN_POINTWISE_SUB, centred, scaled, stats);
  const T masked = s.causal ? causal_mask(centred, scores, lowest) : centred;
  pointwise(CUDNN_POINTWISE_EXP, e, masked);

  // Transposed views [b, h, s_kv, s_q] of P and dS in the I/O type feed dV and dK.
  const Dims scores_t{b, h, skv, sq};
  const Dims strides_t{h * sq * skv, sq * skv, 1, skv};
  const T pt = tensor(io, scores_t, strides_t, true);
  reshape(e, pt);
  matmul(pt, d_o, dv);

  const T dp = virt(scores), dp_centred = virt(scores), ds_unscaled = virt(scores), ds = virt(scores);
  matmul(d_o, vt, dp);
  pointwise(CUDNN_POINTWISE_SUB, dp_centred, dp, softmax_sum);
  pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, dp_centred, e);
  pointwise(CUDNN_POINTWISE_MUL, ds, ds_unscaled, scale);

  const T dst = tensor(io, scores_t, strides_t, true);
  reshape(ds, dst);
  matmul(dst, q, dk);

  const T k = tensor(io, {b, h, skv, d}, bshd(h, skv, d), true);
  reshape(kt, k);
  matmul(ds, k, dq_accum);
  pointwise(CUDNN_POINTWISE_IDENTITY, dq, dq_accum);
  return plan();
}

bool SdpaBuilder::plan() {
  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
      ops_.data());
  finalize(graph, "operation graph");
  if (!why_.empty()) return false;

  // Heuristic A first; the fallback list when A offers nothing that builds. The first engine
  // config whose plan finalizes wins (heuristics order them fastest first).
  std::string last = "no engine config offered";
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (!why_.empty()) return false;
    if (const cudnnStatus_t st = cudnnBackendFinalize(heur); st != CUDNN_STATUS_SUCCESS) {
      last = std::string("engine heuristics: ") + cudnnGetErrorString(st);
      continue;
    }
    int64_t count = 0;
    cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    /// Eight configs at most: the fused attention graphs match one or two engines, and each
    /// failed plan can cost a runtime compilation.
    count = std::min<int64_t>(count, 8);
    std::vector<cudnnBackendDescriptor_t> cfgs;
    for (int64_t i = 0; i < count; ++i) cfgs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    if (!why_.empty()) return false;
    int64_t got = 0;
    if (count > 0 && cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              count, &got, cfgs.data()) != CUDNN_STATUS_SUCCESS)
      got = 0;
    for (int64_t i = 0; i < got; ++i) {
      cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
      set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[static_cast<size_t>(i)]);
      if (!why_.empty()) return false;
      if (const cudnnStatus_t st = cudnnBackendFinalize(p); st != CUDNN_STATUS_SUCCESS) {
        last = std::string("execution plan: ") + cudnnGetErrorString(st);
        continue;
      }
      out_->plan_ = p;
      break;
    }
    if (out_->plan_ != nullptr) break;
  }
  if (out_->plan_ == nullptr) {
    why_ = last;
    return false;
  }

  int64_t ws_bytes = 0;
  int64_t n = 0;
  check(cudnnBackendGetAttribute(out_->plan_, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                 &ws_bytes),
        "workspace size");
  void* ws = nullptr;
  if (why_.empty() && ws_bytes > 0) {
    if (cudaMalloc(&ws, static_cast<size_t>(ws_bytes)) != cudaSuccess) {
      cudaGetLastError();
      why_ = "out of device memory for the cuDNN workspace";
      return false;
    }
    out_->buffers_.push_back(ws);
  }
  out_->pack_ = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(out_->pack_, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids_.size()),
      uids_.data());
  set(out_->pack_, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs_.size()),
      ptrs_.data());
  set(out_->pack_, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  finalize(out_->pack_, "variant pack");
  return why_.empty();
}

std::unique_ptr<Sdpa> Sdpa::create(cudnnHandle_t handle, const SdpaShape& s, cudaStream_t stream, std::string* why) {
  std::unique_ptr<Sdpa> sd(new Sdpa());
  sd->handle_ = handle;
  SdpaBuilder builder(sd.get(), handle, stream);
  if (!builder.build(s)) {
    *why = builder.why();
    return nullptr;
  }
  // One checked run: a plan that cuDNN refuses at execution (or that faults) would otherwise be
  // timed as an empty stream.
  if (const cudnnStatus_t st = sd->launch(stream); st != CUDNN_STATUS_SUCCESS) {
    cudaStreamSynchronize(stream);
    *why = std::string("cudnnBackendExecute failed: ") + cudnnGetErrorString(st);
    return nullptr;
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    *why = std::string("fused attention failed on the GPU: ") + cudaGetErrorString(e);
    return nullptr;
  }
  return sd;
}

Sdpa::~Sdpa() {
  for (auto it = descs_.rbegin(); it != descs_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  for (void* p : buffers_) cudaFree(p);
}

cudnnStatus_t Sdpa::launch(cudaStream_t stream) const {
  if (zero_ != nullptr) cudaMemsetAsync(zero_, 0, zero_bytes_, stream);
  return cudnnBackendExecute(handle_, plan_, pack_);
}

}  // namespace capsim::calibrate
