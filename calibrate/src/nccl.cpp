// NCCL collectives in one process over the local GPUs (ncclCommInitAll), timed with the host
// clock around back-to-back operations as nccl-tests does. Multi-node runs (MPI) are not built:
// use nccl-tests there and `capsim calibrate import-nccl-tests`.
#include <nccl.h>

#include <chrono>
#include <cstdio>

#include "suites.hpp"

namespace capsim::calibrate {
namespace {

enum class Op { all_reduce, all_gather, reduce_scatter, all_to_all, send_recv };

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce: return "all_reduce";
    case Op::all_gather: return "all_gather";
    case Op::reduce_scatter: return "reduce_scatter";
    case Op::all_to_all: return "all_to_all";
    case Op::send_recv: return "send_recv";
  }
  return "all_reduce";
}

/// busbw / algbw (nccl-tests doc/PERFORMANCE.md).
double bus_factor(Op op, int n) {
  const double r = n;
  switch (op) {
    case Op::all_reduce: return 2 * (r - 1) / r;
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all: return (r - 1) / r;
    case Op::send_recv: return 1;
  }
  return 1;
}

struct Group {
  int ranks = 0;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<float*> send;
  std::vector<float*> recv;
  size_t max_bytes = 0;

  ~Group() {
    // Finalize every rank in one group before destroying: one thread owns all ranks here, and
    // a blocking finalize (or a destroy that finalizes) of one rank waits for its peers.
    if (!comms.empty()) {
      ncclGroupStart();
      for (ncclComm_t c : comms) ncclCommFinalize(c);
      ncclGroupEnd();
    }
    for (int r = 0; r < ranks; ++r) {
      cudaSetDevice(r);
      if (r < static_cast<int>(send.size())) cudaFree(send[r]);
      if (r < static_cast<int>(recv.size())) cudaFree(recv[r]);
      if (r < static_cast<int>(streams.size())) cudaStreamDestroy(streams[r]);
      if (r < static_cast<int>(comms.size())) ncclCommDestroy(comms[r]);
    }
  }
};

/// Enqueues one operation on every rank; `bytes` in nccl-tests' size semantics.
ncclResult_t launch(const Group& g, Op op, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  const size_t part = count / static_cast<size_t>(g.ranks);
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < g.ranks && res == ncclSuccess; ++r) {
    switch (op) {
      case Op::all_reduce:
        res = ncclAllReduce(g.send[r], g.recv[r], count, ncclFloat, ncclSum, g.comms[r], g.streams[r]);
        break;
      case Op::all_gather:  // size = output buffer
        res = ncclAllGather(g.send[r], g.recv[r], part, ncclFloat, g.comms[r], g.streams[r]);
        break;
      case Op::reduce_scatter:  // size = input buffer
        res = ncclReduceScatter(g.send[r], g.recv[r], part, ncclFloat, ncclSum, g.comms[r], g.streams[r]);
        break;
      case Op::all_to_all:
        for (int p = 0; p < g.ranks && res == ncclSuccess; ++p) {
          res = ncclSend(g.send[r] + part * p, part, ncclFloat, p, g.comms[r], g.streams[r]);
          if (res == ncclSuccess) res = ncclRecv(g.recv[r] + part * p, part, ncclFloat, p, g.comms[r], g.streams[r]);
        }
        break;
      case Op::send_recv: {  // pairs (0,1), (2,3), ...: each sends its buffer to the other
        const int peer = r ^ 1;
        res = ncclSend(g.send[r], count, ncclFloat, peer, g.comms[r], g.streams[r]);
        if (res == ncclSuccess) res = ncclRecv(g.recv[r], count, ncclFloat, peer, g.comms[r], g.streams[r]);
        break;
      }
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

void sync_all(const Group& g) {
  for (int r = 0; r < g.ranks; ++r) {
    cudaSetDevice(r);
    cudaStreamSynchronize(g.streams[r]);
  }
}

/// Sets up `ranks` communicators on devices 0..ranks-1 with send/receive buffers as large as
/// memory allows up to `cap` bytes; false with a note when NCCL fails.
bool make_group(int ranks, size_t cap, Group* g) {
  g->ranks = ranks;
  g->comms.resize(ranks);
  std::vector<int> devs(ranks);
  for (int r = 0; r < ranks; ++r) devs[r] = r;
  const ncclResult_t res = ncclCommInitAll(g->comms.data(), ranks, devs.data());
  if (res != ncclSuccess) {
    std::fprintf(stderr, "capsim-calibrate: ncclCommInitAll(%d) failed: %s\n", ranks, ncclGetErrorString(res));
    g->comms.clear();
    return false;
  }
  size_t max_bytes = cap;
  for (int r = 0; r < ranks; ++r) {
    cudaSetDevice(r);
    const size_t usable = usable_memory() / 2;
    while (max_bytes > usable && max_bytes > 8) max_bytes /= 2;
  }
  g->max_bytes = max_bytes;
  g->streams.resize(ranks);
  g->send.resize(ranks);
  g->recv.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    cudaSetDevice(r);
    cudaStreamCreateWithFlags(&g->streams[r], cudaStreamNonBlocking);
    if (cudaMalloc(&g->send[r], max_bytes) != cudaSuccess || cudaMalloc(&g->recv[r], max_bytes) != cudaSuccess) {
      std::fprintf(stderr, "capsim-calibrate: collective buffers of %zu bytes do not fit on GPU %d\n", max_bytes, r);
      return false;
    }
    fill_values(g->send[r], max_bytes / sizeof(float), 0, g->streams[r]);
    cudaMemsetAsync(g->recv[r], 0, max_bytes, g->streams[r]);
  }
  sync_all(*g);
  return true;
}

}  // namespace

bool run_nccl(Context& ctx) {
  if (ctx.device_count < 2) {
    std::fprintf(stderr, "capsim-calibrate: nccl skipped: %d GPU visible, collectives need 2\n", ctx.device_count);
    return true;
  }
  std::vector<int> sizes;
  for (int n = 2; n <= ctx.device_count; n *= 2) sizes.push_back(n);
  if (sizes.back() != ctx.device_count) sizes.push_back(ctx.device_count);
  /// 8 B..4 GiB doubling, as nccl-tests -b 8 -e 4G -f 2; quick: 8 B..256 MiB every 4x.
  const size_t cap = ctx.quick ? (size_t{256} << 20) : (size_t{4} << 30);
  const size_t factor = ctx.quick ? 4 : 2;
  TimingConfig cfg = ctx.timing;
  bool ok = true;
  for (const int ranks : sizes) {
    Group g;
    if (!make_group(ranks, cap, &g)) continue;
    for (const Op op : {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::all_to_all, Op::send_recv}) {
      if (op == Op::send_recv && ranks % 2 != 0) continue;
      for (size_t bytes = 8; bytes <= g.max_bytes && ok; bytes *= factor) {
        const bool split = op == Op::all_gather || op == Op::reduce_scatter || op == Op::all_to_all;
        if (bytes % (sizeof(float) * (split ? static_cast<size_t>(ranks) : 1)) != 0) continue;
        JsonLine line;
        line.add("kind", "collective")
            .add("op", op_name(op))
            .add("ranks", ranks)
            .add("nodes", 1)
            .add("scope", "intra")
            .add("bytes", static_cast<int64_t>(bytes))
            .add("dtype", "fp32")
            .add("in_place", false);
        if (ctx.raw->has(line)) continue;
        ncclResult_t res = ncclSuccess;
        for (int i = 0; i < cfg.warmup && res == ncclSuccess; ++i) res = launch(g, op, bytes);
        sync_all(g);
        if (res != ncclSuccess) {
          std::fprintf(stderr, "capsim-calibrate: %s on %d ranks failed: %s\n", op_name(op), ranks,
                       ncclGetErrorString(res));
          break;
        }
        // Operations per sample: ~target_batch_s worth, from one timed warm operation.
        const auto t0 = std::chrono::steady_clock::now();
        launch(g, op, bytes);
        sync_all(g);
        const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const int inner = one > 0 ? std::max(1, std::min(cfg.max_inner, static_cast<int>(cfg.target_batch_s / one)))
                                  : cfg.max_inner;
        bool failed = false;
        Stats s = sample_until_stable(
            [&] {
              const auto start = std::chrono::steady_clock::now();
              for (int i = 0; i < inner; ++i) failed = launch(g, op, bytes) != ncclSuccess || failed;
              sync_all(g);
              return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / inner;
            },
            cfg);
        if (failed) s.median_s = 0;  // record() leaves it out
        const double algbw = static_cast<double>(bytes) / s.median_s / 1e9;
        line.add("algbw_gbps", algbw).add("busbw_gbps", algbw * bus_factor(op, ranks));
        Context rank0 = ctx;
        rank0.monitor = nullptr;  // one GPU's clock says little about a collective
        ok = record(rank0, line, s);
      }
    }
  }
  cudaSetDevice(ctx.device);
  return ok;
}

}  // namespace capsim::calibrate
