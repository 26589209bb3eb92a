// NCCL collectives timed with the host clock around back-to-back operations, as nccl-tests
// does. One process drives every local GPU (ncclCommInitAll); when built with MPI and started
// by a launcher with more than one rank, each rank drives one GPU (ncclCommInitRank), all
// ranks time in lockstep and rank 0 records the slowest rank's time.
#include <nccl.h>
#ifdef CAPSIM_CALIBRATE_MPI
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>

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

// Lockstep helpers: in MPI mode every rank calls them in the same order (values combined over
// all ranks; slowest = the max, as nccl-tests reports the slowest rank); else the argument.
#ifdef CAPSIM_CALIBRATE_MPI
template <class T>
T combine(const World& w, T v, MPI_Datatype type, MPI_Op op) {
  if (w.size > 1) MPI_Allreduce(MPI_IN_PLACE, &v, 1, type, op, MPI_COMM_WORLD);
  return v;
}
bool from_rank0(const World& w, bool v) {
  int x = v;
  if (w.size > 1) MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return x != 0;
}
bool any_rank(const World& w, bool v) { return combine<int>(w, v, MPI_INT, MPI_LOR) != 0; }
double slowest(const World& w, double v) { return combine(w, v, MPI_DOUBLE, MPI_MAX); }
size_t smallest(const World& w, size_t v) { return combine<uint64_t>(w, v, MPI_UINT64_T, MPI_MIN); }
void barrier(const World& w) {
  if (w.size > 1) MPI_Barrier(MPI_COMM_WORLD);
}
#else
bool from_rank0(const World&, bool v) { return v; }
bool any_rank(const World&, bool v) { return v; }
double slowest(const World&, double v) { return v; }
size_t smallest(const World&, size_t v) { return v; }
void barrier(const World&) {}
#endif

/// The communicators this process drives: all `ranks` of them (one process), one (MPI mode,
/// a member of the group) or none (MPI mode, a rank outside the group that only keeps step).
struct Group {
  int ranks = 0;
  int first = 0;          ///< group rank of comms[0]
  bool half_pairs = false;  ///< send_recv pairs r with r + ranks/2 (MPI: across nodes) instead of r ^ 1
  std::vector<int> devs;  ///< CUDA device of each comm
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
    for (size_t i = 0; i < comms.size(); ++i) {
      cudaSetDevice(devs[i]);
      if (i < send.size()) cudaFree(send[i]);
      if (i < recv.size()) cudaFree(recv[i]);
      if (i < streams.size() && streams[i] != nullptr) cudaStreamDestroy(streams[i]);
      ncclCommDestroy(comms[i]);
    }
  }
};

/// Enqueues one operation on every rank; `bytes` in nccl-tests' size semantics.
ncclResult_t launch(const Group& g, Op op, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  const size_t part = count / static_cast<size_t>(g.ranks);
  ncclResult_t res = ncclGroupStart();
  for (size_t i = 0; i < g.comms.size() && res == ncclSuccess; ++i) {
    const int r = g.first + static_cast<int>(i);
    switch (op) {
      case Op::all_reduce:
        res = ncclAllReduce(g.send[i], g.recv[i], count, ncclFloat, ncclSum, g.comms[i], g.streams[i]);
        break;
      case Op::all_gather:  // size = output buffer
        res = ncclAllGather(g.send[i], g.recv[i], part, ncclFloat, g.comms[i], g.streams[i]);
        break;
      case Op::reduce_scatter:  // size = input buffer
        res = ncclReduceScatter(g.send[i], g.recv[i], part, ncclFloat, ncclSum, g.comms[i], g.streams[i]);
        break;
      case Op::all_to_all:
        for (int p = 0; p < g.ranks && res == ncclSuccess; ++p) {
          res = ncclSend(g.send[i] + part * p, part, ncclFloat, p, g.comms[i], g.streams[i]);
          if (res == ncclSuccess) res = ncclRecv(g.recv[i] + part * p, part, ncclFloat, p, g.comms[i], g.streams[i]);
        }
        break;
      case Op::send_recv: {  // pairs (0,1), (2,3), ... or (r, r + ranks/2): each sends its buffer to the other
        const int peer = g.half_pairs ? (r + g.ranks / 2) % g.ranks : r ^ 1;
        res = ncclSend(g.send[i], count, ncclFloat, peer, g.comms[i], g.streams[i]);
        if (res == ncclSuccess) res = ncclRecv(g.recv[i], count, ncclFloat, peer, g.comms[i], g.streams[i]);
        break;
      }
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

void sync_all(const Group& g) {
  for (size_t i = 0; i < g.streams.size(); ++i) {
    cudaSetDevice(g.devs[i]);
    if (g.streams[i] != nullptr) cudaStreamSynchronize(g.streams[i]);
  }
}

/// One process: `ranks` communicators on devices 0..ranks-1; false with a note when NCCL fails.
bool make_group(int ranks, Group* g) {
  g->ranks = ranks;
  g->comms.resize(ranks);
  for (int r = 0; r < ranks; ++r) g->devs.push_back(r);
  const ncclResult_t res = ncclCommInitAll(g->comms.data(), ranks, g->devs.data());
  if (res != ncclSuccess) {
    std::fprintf(stderr, "capsim-calibrate: ncclCommInitAll(%d) failed: %s\n", ranks, ncclGetErrorString(res));
    g->comms.clear();
    return false;
  }
  return true;
}

/// MPI mode: one communicator over world ranks 0..ranks-1 from a fresh unique id (rank 0 makes
/// it, MPI_Bcast hands it out); the other ranks join nothing. False on every rank if any failed.
bool join_group(const Context& ctx, int ranks, Group* g) {
  g->ranks = ranks;
  ncclUniqueId id{};
  const bool no_id = ctx.world.rank == 0 && ncclGetUniqueId(&id) != ncclSuccess;
  if (any_rank(ctx.world, no_id)) return false;
#ifdef CAPSIM_CALIBRATE_MPI
  MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
  bool failed = false;
  if (ctx.world.rank < ranks) {
    ncclComm_t comm = nullptr;
    const ncclResult_t res = ncclCommInitRank(&comm, ranks, id, ctx.world.rank);
    if (res == ncclSuccess) {
      g->comms = {comm};
      g->devs = {ctx.device};
      g->first = ctx.world.rank;
    } else {
      std::fprintf(stderr, "capsim-calibrate: rank %d: ncclCommInitRank(%d) failed: %s\n", ctx.world.rank, ranks,
                   ncclGetErrorString(res));
      failed = true;
    }
  }
  return !any_rank(ctx.world, failed);
}

/// Send/receive buffers on every GPU `g` drives, as large as memory allows up to `cap` bytes
/// and the same on every rank; false (on every rank) when they do not fit.
bool alloc_buffers(const World& w, size_t cap, Group* g) {
  size_t max_bytes = cap;
  for (const int d : g->devs) {
    cudaSetDevice(d);
    const size_t usable = usable_memory() / 2;
    while (max_bytes > usable && max_bytes > 8) max_bytes /= 2;
  }
  g->max_bytes = max_bytes = smallest(w, max_bytes);
  const size_t n = g->comms.size();
  g->streams.assign(n, nullptr);
  g->send.assign(n, nullptr);
  g->recv.assign(n, nullptr);
  bool failed = false;
  for (size_t i = 0; i < n && !failed; ++i) {
    cudaSetDevice(g->devs[i]);
    cudaStreamCreateWithFlags(&g->streams[i], cudaStreamNonBlocking);
    if (cudaMalloc(&g->send[i], max_bytes) != cudaSuccess || cudaMalloc(&g->recv[i], max_bytes) != cudaSuccess) {
      std::fprintf(stderr, "capsim-calibrate: collective buffers of %zu bytes do not fit on GPU %d\n", max_bytes,
                   g->devs[i]);
      failed = true;
      break;
    }
    fill_values(g->send[i], max_bytes / sizeof(float), 0, g->streams[i]);
    cudaMemsetAsync(g->recv[i], 0, max_bytes, g->streams[i]);
  }
  sync_all(*g);
  return !any_rank(w, failed);
}

}  // namespace

bool run_nccl(Context& ctx) {
  const World& w = ctx.world;
  const bool mpi = w.size > 1;
  const int gpus = mpi ? w.size : ctx.device_count;
  if (gpus < 2) {
    std::fprintf(stderr, "capsim-calibrate: nccl skipped: %d GPU visible, collectives need 2\n", ctx.device_count);
    return true;
  }
  // Group sizes: powers of two and the total; in MPI mode also the node size (rank 0's, the
  // same on every rank) and whole-node multiples, keeping only groups inside one node or made
  // of whole nodes (ranks placed by node, as mpirun --map-by slot and srun's block layout do).
  std::set<int> sizes = {gpus};
  for (int n = 2; n <= gpus; n *= 2) sizes.insert(n);
  if (mpi) {
    const int per_node = static_cast<int>(std::count(w.node.begin(), w.node.end(), w.node[0]));
    for (int n = per_node; n <= gpus; n *= 2) sizes.insert(n);
    std::erase_if(sizes, [&](int n) { return n < 2 || (n > per_node && n % per_node != 0); });
  }
  /// 8 B..4 GiB doubling, as nccl-tests -b 8 -e 4G -f 2; quick: 8 B..256 MiB every 4x.
  const size_t cap = ctx.quick ? (size_t{256} << 20) : (size_t{4} << 30);
  const size_t factor = ctx.quick ? 4 : 2;
  TimingConfig cfg = ctx.timing;
  for (const int ranks : sizes) {
    // Nodes of the group = distinct nodes among world ranks 0..ranks-1.
    const int nodes = mpi ? static_cast<int>(std::set<int>(w.node.begin(), w.node.begin() + ranks).size()) : 1;
    Group g;
    if (mpi ? !join_group(ctx, ranks, &g) : !make_group(ranks, &g)) continue;
    if (!alloc_buffers(w, cap, &g)) continue;
    // Across nodes, pair each rank with one on another node when every such pair crosses.
    g.half_pairs = mpi && nodes > 1;
    bool pairs_cross = true;
    for (int r = 0; r < ranks / 2 && g.half_pairs; ++r) pairs_cross = pairs_cross && w.node[r] != w.node[r + ranks / 2];
    for (const Op op : {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::all_to_all, Op::send_recv}) {
      if (op == Op::send_recv && (ranks % 2 != 0 || !pairs_cross)) continue;
      for (size_t bytes = 8; bytes <= g.max_bytes; bytes *= factor) {
        const bool split = op == Op::all_gather || op == Op::reduce_scatter || op == Op::all_to_all;
        if (bytes % (sizeof(float) * (split ? static_cast<size_t>(ranks) : 1)) != 0) continue;
        JsonLine line;
        line.add("kind", "collective")
            .add("op", op_name(op))
            .add("ranks", ranks)
            .add("nodes", nodes)
            .add("scope", nodes > 1 ? "inter" : "intra")
            .add("bytes", static_cast<int64_t>(bytes))
            .add("dtype", "fp32")
            .add("in_place", false);
        // --resume: rank 0 holds the file; its decision keeps every rank in step.
        if (from_rank0(w, w.rank == 0 && ctx.raw->has(line))) continue;
        ncclResult_t res = ncclSuccess;
        for (int i = 0; i < cfg.warmup && res == ncclSuccess; ++i) res = launch(g, op, bytes);
        sync_all(g);
        if (res != ncclSuccess)
          std::fprintf(stderr, "capsim-calibrate: rank %d: %s on %d ranks failed: %s\n", w.rank, op_name(op), ranks,
                       ncclGetErrorString(res));
        if (any_rank(w, res != ncclSuccess)) break;
        // Operations per sample: ~target_batch_s worth, from one timed warm operation (slowest rank).
        barrier(w);
        const auto t0 = std::chrono::steady_clock::now();
        launch(g, op, bytes);
        sync_all(g);
        const double one = slowest(w, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        const int inner = one > 0 ? std::max(1, std::min(cfg.max_inner, static_cast<int>(cfg.target_batch_s / one)))
                                  : cfg.max_inner;
        bool failed = false;
        // Each batch starts together (barrier) and counts as the slowest rank's time; every rank
        // gets the same samples, so sample_until_stable stops after the same batch everywhere.
        Stats s = sample_until_stable(
            [&] {
              barrier(w);
              const auto start = std::chrono::steady_clock::now();
              for (int i = 0; i < inner; ++i) failed = launch(g, op, bytes) != ncclSuccess || failed;
              sync_all(g);
              const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / inner;
              failed = any_rank(w, failed);
              return slowest(w, t);
            },
            cfg);
        if (failed) s.median_s = 0;  // record() leaves it out
        const double algbw = static_cast<double>(bytes) / s.median_s / 1e9;
        line.add("algbw_gbps", algbw).add("busbw_gbps", algbw * bus_factor(op, ranks));
        bool written = true;
        if (w.rank == 0) {
          Context rank0 = ctx;
          rank0.monitor = nullptr;  // one GPU's clock says little about a collective
          written = record(rank0, line, s);
        }
        if (!from_rank0(w, written)) return false;
      }
    }
  }
  cudaSetDevice(ctx.device);
  return true;
}

bool mpi_start(int* argc, char*** argv, World* w) {
#ifdef CAPSIM_CALIBRATE_MPI
  /// Launcher variables: Open MPI, PMI-1/2 (MPICH, Intel MPI, Slurm --mpi=pmi2), PMIx, MVAPICH2.
  /// MPI starts only under one of them: a plain run must not depend on it (singleton init can
  /// fail or hang where no MPI daemon is reachable).
  constexpr const char* kLauncherVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"};
  bool launched = false;
  long expected = 0;  ///< ranks the launcher announces, where its variable says
  for (const char* var : kLauncherVars) {
    const char* v = std::getenv(var);
    launched = launched || v != nullptr;
    if (v != nullptr && std::string(var) != "PMIX_RANK") expected = std::max(expected, std::strtol(v, nullptr, 10));
  }
  if (!launched) return true;
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w->size);
  if (w->size == 1) {
    MPI_Finalize();
    *w = World{};
    if (expected <= 1) return true;
    // Each of the launcher's processes would run alone and write FILE: refuse.
    std::fprintf(stderr, "capsim-calibrate: the launcher started %ld ranks but MPI sees 1: built against a "
                 "different MPI than the launcher's\n", expected);
    return false;
  }
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &w->local_rank);
  MPI_Comm_size(local, &w->local_size);
  int leader = w->rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local);
  MPI_Comm_free(&local);
  w->node.resize(static_cast<size_t>(w->size));
  MPI_Allgather(&leader, 1, MPI_INT, w->node.data(), 1, MPI_INT, MPI_COMM_WORLD);
  w->nodes = static_cast<int>(std::set<int>(w->node.begin(), w->node.end()).size());
#else
  (void)argc, (void)argv, (void)w;
#endif
  return true;
}

int mpi_end(int rc, const World& w) {
#ifdef CAPSIM_CALIBRATE_MPI
  if (w.size > 1 && rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  if (w.size > 1) MPI_Finalize();
#endif
  (void)w;
  return rc;
}

}  // namespace capsim::calibrate
