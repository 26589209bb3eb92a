// capsim-calibrate: measures GEMM, attention, memory, launch and NCCL performance on this
// machine's GPUs and writes the raw measurement file of docs/calibration.md.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "suites.hpp"

namespace cal = capsim::calibrate;

namespace {

#ifdef CAPSIM_CALIBRATE_MPI
#define CAPSIM_MPI_USAGE                                                                                      \
  "  under mpirun/srun (one rank per GPU): nccl over all ranks and nodes, the other suites on rank 0 only;\n" \
  "                      only rank 0 writes FILE\n"
#else
#define CAPSIM_MPI_USAGE "  (built without MPI: nccl over this machine's GPUs only)\n"
#endif

const char* const kUsage =
    "usage: capsim-calibrate -o RAW.jsonl [--quick] [--resume] [--only SUITES] [--gemm-shapes FILE] [--for SCENARIO]\n"
    "                        [--l2-flush] [--device N]\n"
    "  -o, --output FILE   raw measurement file (JSON Lines, capsim-calibration-raw/1)\n"
    "  --quick             small grids and capped repeats (under 5 minutes on one GPU)\n"
    "  --resume            keep FILE's lines and skip the measurements already there\n"
    "  --only SUITES       comma list of gemm,attention,memory,launch,nccl (default: all)\n"
    "  --gemm-shapes FILE  extra GEMM shapes, one \"dtype m n k\" per line (dtype bf16|fp16|fp8|int8)\n"
    "  --for SCENARIO      also the exact GEMM shapes SCENARIO costs (runs `capsim calibrate shapes`;\n"
    "                      capsim from $CAPSIM_BIN, next to this binary's build, or PATH), kept in RAW.shapes.txt\n"
    "  --l2-flush          write 2x the L2 size before each timed launch\n"
    "  --device N          GPU for the single-GPU suites (default 0; under MPI: the local rank)\n"
    CAPSIM_MPI_USAGE
    "exit: 0 done, 1 write or CUDA failure, 2 bad arguments, 3 no GPU, 4 driver too old\n";

const std::vector<std::string> kSuites = {"gemm", "attention", "memory", "launch", "nccl"};

struct Options {
  std::string output;
  bool quick = false;
  bool resume = false;
  bool l2_flush = false;
  int device = 0;
  std::set<std::string> only;
  std::string gemm_shapes;
  std::string for_scenario;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "capsim-calibrate: %s\n%s", message.c_str(), kUsage);
  return 2;
}

/// Parses argv; returns -1 when fine, else the exit code (0 for --help).
int parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-o" || a == "--output") {
      if (!value(&o->output)) return usage_error(a + " needs a file");
    } else if (a == "--quick") {
      o->quick = true;
    } else if (a == "--resume") {
      o->resume = true;
    } else if (a == "--l2-flush") {
      o->l2_flush = true;
    } else if (a == "--device") {
      if (!value(&v)) return usage_error("--device needs a number");
      char* end = nullptr;
      const long d = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || d < 0 || d > 1024) return usage_error("--device: bad number '" + v + "'");
      o->device = static_cast<int>(d);
    } else if (a == "--only") {
      if (!value(&v)) return usage_error("--only needs a list");
      std::stringstream ss(v);
      std::string name;
      while (std::getline(ss, name, ',')) {
        bool known = false;
        for (const auto& s : kSuites) known = known || s == name;
        if (!known) return usage_error("--only: unknown suite '" + name + "' (valid: gemm,attention,memory,launch,nccl)");
        o->only.insert(name);
      }
    } else if (a == "--gemm-shapes") {
      if (!value(&o->gemm_shapes)) return usage_error("--gemm-shapes needs a file");
    } else if (a == "--for") {
      if (!value(&o->for_scenario)) return usage_error("--for needs a scenario file");
    } else {
      return usage_error("unknown argument '" + a + "'");
    }
  }
  if (o->output.empty()) return usage_error("-o FILE is required");
  if (o->only.empty()) o->only.insert(kSuites.begin(), kSuites.end());
  return -1;
}

/// Reads "dtype m n k" lines ('#' starts a comment); false with `why` naming the bad line.
bool read_gemm_shapes(const std::string& path, std::vector<cal::GemmRequest>* out, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = "--gemm-shapes: cannot read " + path;
    return false;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string dtype;
    if (!(words >> dtype)) continue;
    cal::GemmRequest r;
    std::string rest;
    if (!cal::parse_dtype(dtype, &r.dtype) || !(words >> r.m >> r.n >> r.k) || (words >> rest) || r.m <= 0 ||
        r.n <= 0 || r.k <= 0) {
      *why = path + ":" + std::to_string(number) + ": expected \"dtype m n k\" with dtype bf16|fp16|fp8|int8";
      return false;
    }
    out->push_back(r);
  }
  return true;
}

/// "13.0" from 13000 (CUDA's major*1000 + minor*10).
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

/// "9.12.0" from 91200: cuBLAS, cuDNN 9 and NCCL >= 2.9 all encode major*10000 + minor*100 + patch.
std::string library_version(long long v) {
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

cal::JsonLine header(const Options& o, const cudaDeviceProp& prop, int count, const cal::Monitor& monitor,
                     int runtime) {
  cal::JsonLine h;
  h.add("schema", "capsim-calibration-raw/1").add("kind", "header").add("source", "capsim-calibrate");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) h.add("host", host);
  h.add("gpu", prop.name).add("gpu_count", count);
  if (const std::string d = cal::driver_version(monitor); !d.empty()) h.add("driver", d);
  h.add("cuda_runtime", cuda_version(runtime));
  h.add("cublas", library_version(static_cast<long long>(cublasLtGetVersion())));
  h.add("cudnn", library_version(static_cast<long long>(cudnnGetVersion())));
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) h.add("nccl", library_version(nccl));
  h.add("created", utc_now()).add("quick", o.quick);
  return h;
}

/// Single-quoted for /bin/sh.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// The capsim CLI: $CAPSIM_BIN, the build tree's cli/capsim beside calibrate/, or PATH.
std::string capsim_binary() {
  if (const char* env = std::getenv("CAPSIM_BIN"); env && *env) return env;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.find_last_of('/'));
    const std::string sibling = dir + "/../cli/capsim";
    if (access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return "capsim";
}

/// Everything after argument parsing; in MPI mode every rank runs it, rank 0 alone writes.
int run(const Options& o, const cal::World& world) {
  const bool talk = world.rank == 0;
  cal::Context ctx;
  ctx.world = world;
  if (!o.gemm_shapes.empty() && talk) {  // rank 0 alone runs the GEMM suite; others may lack the file
    std::string why;
    if (!read_gemm_shapes(o.gemm_shapes, &ctx.extra_gemms, &why)) return usage_error(why);
  }
  if (!o.for_scenario.empty() && talk) {
    const std::string shapes = o.output + ".shapes.txt";
    const std::string cmd = shell_quote(capsim_binary()) + " calibrate shapes " + shell_quote(o.for_scenario) + " -o " +
                            shell_quote(shapes);
    if (std::system(cmd.c_str()) != 0)
      return usage_error("--for: `" + cmd + "` failed (set CAPSIM_BIN to the capsim binary)");
    std::string why;
    if (!read_gemm_shapes(shapes, &ctx.extra_gemms, &why)) return usage_error(why);
  }

  // The versions first: with a driver older than the runtime, cudaGetDeviceCount fails with
  // cudaErrorInsufficientDriver, which must read as "driver too old" (4), not "no GPU" (3).
  // cudaDriverGetVersion gives 0 when no driver is installed at all (then: no GPU).
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  int count = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&count);
  // Same major version: CUDA's minor-version compatibility lets a 13.x runtime run on any
  // 13.0+ driver, so only a failed start or an older major counts as too old.
  if (driver > 0 && (count_error == cudaErrorInsufficientDriver || driver / 1000 < runtime / 1000)) {
    std::fprintf(stderr, "capsim-calibrate: driver supports CUDA %s, runtime needs %s; update the driver\n",
                 cuda_version(driver).c_str(), cuda_version(runtime).c_str());
    return 4;
  }
  if (count_error != cudaSuccess || count == 0) {
    std::fprintf(stderr, "capsim-calibrate: no CUDA GPU visible (%s)\n",
                 count_error != cudaSuccess ? cudaGetErrorString(count_error) : "device count is 0");
    return 3;
  }
  if (driver < runtime)
    std::fprintf(stderr, "capsim-calibrate: note: driver supports CUDA %s, runtime is %s (minor-version compatibility)\n",
                 cuda_version(driver).c_str(), cuda_version(runtime).c_str());
  const int device = world.size > 1 ? world.local_rank % count : o.device;
  if (world.size == 1 && o.device >= count) return usage_error("--device " + std::to_string(o.device) + ": only " +
                                            std::to_string(count) + " GPU(s) visible");

  cal::RawFile raw(o.output);
  if (o.resume && talk) {
    std::string why;
    if (!raw.load(&why)) {
      std::fprintf(stderr, "capsim-calibrate: --resume: %s\n", why.c_str());
      return 1;
    }
  }

  cudaSetDevice(device);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  cal::Monitor monitor;
  const bool have_monitor = monitor.init();
  if (!have_monitor && talk) std::fprintf(stderr, "capsim-calibrate: NVML unavailable; clock, power and temperature not logged\n");

  if (!raw.has_header() && talk) {
    std::string why;
    if (!raw.append(header(o, prop, count, monitor, runtime), &why)) {
      std::fprintf(stderr, "capsim-calibrate: %s\n", why.c_str());
      return 1;
    }
  }

  cal::Cupti cupti;
  cupti.init();

  ctx.device = device;
  ctx.device_count = count;
  ctx.compute_capability = prop.major * 10 + prop.minor;
  ctx.quick = o.quick;
  ctx.timing = o.quick ? cal::quick_config() : cal::full_config();
  ctx.timing.l2_flush = o.l2_flush;
  ctx.raw = &raw;
  ctx.cupti = &cupti;
  ctx.monitor = have_monitor ? &monitor : nullptr;
  /// 32 MiB workspace: what PyTorch gives cuBLASLt on Hopper (CUBLASLT_WORKSPACE_SIZE default).
  ctx.workspace_bytes = size_t{32} << 20;
  if (cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking) != cudaSuccess ||
      cublasLtCreate(&ctx.lt) != CUBLAS_STATUS_SUCCESS ||
      cudaMalloc(&ctx.workspace, ctx.workspace_bytes) != cudaSuccess) {
    std::fprintf(stderr, "capsim-calibrate: CUDA setup failed on GPU %d (%s)\n", device,
                 cudaGetErrorString(cudaGetLastError()));
    return 1;
  }

  if (talk)
    std::fprintf(stderr, "capsim-calibrate: %s (sm_%d), %d GPU(s), writing %s\n", prop.name, ctx.compute_capability,
                 count, o.output.c_str());
  if (talk && world.size > 1)
    std::fprintf(stderr, "capsim-calibrate: MPI: %d ranks on %d node(s); suites other than nccl run on rank 0 only\n",
                 world.size, world.nodes);
  struct Suite {
    const char* name;
    bool (*run)(cal::Context&);
  };
  const Suite suites[] = {{"launch", cal::run_launch},
                          {"memory", cal::run_memory},
                          {"gemm", cal::run_gemm},
                          {"attention", cal::run_attention},
                          {"nccl", cal::run_nccl}};
  for (const Suite& s : suites) {
    if (o.only.count(s.name) == 0) continue;
    if (!talk && std::string(s.name) != "nccl") continue;  // MPI mode: single-GPU suites on rank 0
    const size_t before = raw.measurements();
    if (talk) std::fprintf(stderr, "capsim-calibrate: %s ...\n", s.name);
    if (!s.run(ctx)) return 1;
    if (talk) std::fprintf(stderr, "capsim-calibrate: %s: %zu measurement(s)\n", s.name, raw.measurements() - before);
  }

  cudaFree(ctx.workspace);
  cublasLtDestroy(ctx.lt);
  cudaStreamDestroy(ctx.stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int rc = parse_args(argc, argv, &o); rc >= 0) return rc;
  cal::World world;
  if (!cal::mpi_start(&argc, &argv, &world)) return 2;
  return cal::mpi_end(run(o, world), world);
}
