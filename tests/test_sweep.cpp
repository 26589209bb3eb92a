// Sweeps resume without redoing rows; search is deterministic for any thread count.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/search.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/scenario_io.hpp"
#include "capsim/io/sweep.hpp"

namespace capsim {
namespace {

namespace fs = std::filesystem;

const fs::path kSmall = fs::path(CAPSIM_TEST_SOURCE_DIR) / "sweeps" / "small.json";

TEST(Sweep, GridAndOverrides) {
  const io::SweepSpec s = io::load_sweep(kSmall);
  EXPECT_EQ(s.rows(), 3u * 2u * 2u);
  // The last axis moves fastest; a zip moves its paths together.
  EXPECT_EQ(s.overrides(0), (std::vector<std::string>{"training.tp=1", "training.dp=64", "training.micro_batch=1",
                                                      "training.recompute=\"selective\""}));
  EXPECT_EQ(s.overrides(11), (std::vector<std::string>{"training.tp=4", "training.dp=16", "training.micro_batch=2",
                                                       "training.recompute=\"full\""}));
}

// A serving row whose requests can never fit the KV cache is an answer, counted apart from
// the rows that ran and from the errors.
TEST(Sweep, DoesNotFitIsCountedApart) {
  const io::SweepSpec s = io::load_sweep(fs::path(CAPSIM_TEST_SOURCE_DIR) / "sweeps" / "serving-fit.json");
  const fs::path dir = fs::temp_directory_path() / "capsim-sweep-fit";
  fs::remove_all(dir);
  fs::create_directories(dir);
  io::SweepRun run;
  run.out = dir / "rows.jsonl";
  run.threads = 2;
  const io::SweepSummary sum = io::run_sweep(s, run);
  EXPECT_EQ(sum.ok, 1u);
  EXPECT_EQ(sum.does_not_fit, 1u);
  EXPECT_EQ(sum.failed, 0u);
  std::ifstream in(run.out);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["status"], "ok");
  EXPECT_EQ(rows[1]["status"], "does_not_fit");
  EXPECT_NE(rows[1]["reason"].get<std::string>().find("no room for the KV cache"), std::string::npos);
  const nlohmann::json summary = nlohmann::json::parse(io::read_text_file(sum.summary_file));
  EXPECT_EQ(summary["does_not_fit"], 1);
  EXPECT_EQ(summary["ok"], 1);
}

TEST(Sweep, ResumesFromTheJournal) {
  const io::SweepSpec s = io::load_sweep(kSmall);
  const fs::path dir = fs::temp_directory_path() / "capsim-sweep-resume";
  fs::remove_all(dir);
  fs::create_directories(dir);
  io::SweepRun run;
  run.out = dir / "full.jsonl";
  run.threads = 2;
  io::run_sweep(s, run);
  const std::string full = io::read_text_file(run.out);

  // An interrupted run left four rows in its journal: they are not computed again.
  io::SweepRun again = run;
  again.out = dir / "resumed.jsonl";
  {
    std::ifstream in(run.out);
    std::ofstream j(again.out.string() + ".journal");
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(s.grid_hash));
    j << nlohmann::json{{"grid_hash", hash}}.dump() << "\n";
    std::string line;
    for (int i = 0; i < 4 && std::getline(in, line); ++i) j << line << "\n";
    j << "{\"index\": 7, \"trunc";  // a line cut short by the interruption
  }
  const io::SweepSummary sum = io::run_sweep(s, again);
  EXPECT_EQ(sum.skipped_resumed, 4u);
  EXPECT_FALSE(sum.interrupted);
  EXPECT_EQ(io::read_text_file(again.out), full);
  EXPECT_FALSE(fs::exists(again.out.string() + ".journal"));
}

std::string header_of(const io::SweepSpec& s) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(s.grid_hash));
  return nlohmann::json{{"grid_hash", hash}}.dump();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

/// A fresh folder holding the rows of small.json run whole, as full.jsonl.
struct JournalFixture {
  io::SweepSpec spec = io::load_sweep(kSmall);
  fs::path dir;
  std::string full;
  std::vector<std::string> lines;  // the rows of full.jsonl
  explicit JournalFixture(const std::string& name) : dir(fs::temp_directory_path() / ("capsim-journal-" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    io::SweepRun run;
    run.out = dir / "full.jsonl";
    run.threads = 2;
    io::run_sweep(spec, run);
    full = io::read_text_file(run.out);
    std::istringstream in(full);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  /// A run of the grid into out.jsonl; `stopped` stops it before any row (as a Ctrl-C would).
  io::SweepSummary run(bool stopped = false) const {
    std::atomic<bool> stop{stopped};
    io::SweepRun r;
    r.out = dir / "out.jsonl";
    r.threads = 2;
    r.stop = &stop;
    return io::run_sweep(spec, r);
  }
  fs::path journal() const { return dir / "out.jsonl.journal"; }
  std::string rows(size_t n) const {
    std::string t;
    for (size_t i = 0; i < n; ++i) t += lines[i] + "\n";
    return t;
  }
};

TEST(SweepJournal, HeaderWithoutRowsResumedTwice) {
  // Killed before the first row, then stopped again before the first row: the journal
  // must still resume (a second header of the same grid is not written, and is accepted).
  JournalFixture f("header-only");
  write_text(f.journal(), header_of(f.spec) + "\n");
  EXPECT_TRUE(f.run(true).interrupted);
  EXPECT_EQ(io::read_text_file(f.journal()), header_of(f.spec) + "\n");
  write_text(f.journal(), header_of(f.spec) + "\n" + header_of(f.spec) + "\n" + f.rows(3));
  const io::SweepSummary sum = f.run();
  EXPECT_EQ(sum.skipped_resumed, 3u);
  EXPECT_EQ(io::read_text_file(f.dir / "out.jsonl"), f.full);
}

TEST(SweepJournal, TornHeaderIsCutOffBeforeAppending) {
  // A header cut short by a kill holds no rows: it is replaced by a whole header, so rows
  // appended after it are read back on the next resume.
  JournalFixture f("torn-header");
  write_text(f.journal(), header_of(f.spec).substr(0, 20));
  EXPECT_TRUE(f.run(true).interrupted);
  EXPECT_EQ(io::read_text_file(f.journal()), header_of(f.spec) + "\n");
  // What an earlier release left: the whole header appended to the one cut short.
  write_text(f.journal(), header_of(f.spec).substr(0, 20) + header_of(f.spec) + "\n" + f.rows(2));
  EXPECT_EQ(f.run().skipped_resumed, 2u);
  EXPECT_EQ(io::read_text_file(f.dir / "out.jsonl"), f.full);
  // A header cut short that is not this grid's is another grid's journal.
  write_text(f.journal(), "{\"grid_hash\":\"zz");
  EXPECT_THROW(f.run(), InputError);
}

TEST(SweepJournal, TornLastRowIsCutOffBeforeAppending) {
  JournalFixture f("torn-row");
  write_text(f.journal(), header_of(f.spec) + "\n" + f.rows(4) + "{\"index\": 7, \"trunc");
  const io::SweepSummary stopped = f.run(true);
  EXPECT_EQ(stopped.skipped_resumed, 4u);
  EXPECT_EQ(io::read_text_file(f.journal()), header_of(f.spec) + "\n" + f.rows(4));
  EXPECT_EQ(f.run().skipped_resumed, 4u);
  EXPECT_EQ(io::read_text_file(f.dir / "out.jsonl"), f.full);
  // What an earlier release left: a whole row appended to one cut short (dropped, run again).
  write_text(f.journal(), header_of(f.spec) + "\n" + f.rows(2) + "{\"index\": 7, \"tr" + f.lines[2] + "\n" + f.lines[3] + "\n");
  EXPECT_EQ(f.run().skipped_resumed, 3u);
  EXPECT_EQ(io::read_text_file(f.dir / "out.jsonl"), f.full);
  // A whole line that does not parse is named with its line and column.
  write_text(f.journal(), header_of(f.spec) + "\n" + f.rows(2) + "{\"index\": 1e999}\n");
  try {
    f.run();
    FAIL() << "a journal line that does not parse was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("out.jsonl.journal:4: number at line 1, column 11"), std::string::npos) << e.what();
  }
}

TEST(SweepJournal, RowsOfAnotherGridAreRejected) {
  JournalFixture f("other-grid");
  const io::SweepSpec b = io::load_sweep(fs::path(CAPSIM_TEST_SOURCE_DIR) / "sweeps" / "small-b.json");
  ASSERT_NE(b.grid_hash, f.spec.grid_hash);
  io::SweepRun rb;
  rb.out = f.dir / "b.jsonl";
  io::run_sweep(b, rb);
  std::istringstream in(io::read_text_file(rb.out));
  std::vector<std::string> brows;
  for (std::string l; std::getline(in, l);) brows.push_back(l);
  // Two grids appended to one journal: the second header is named.
  write_text(f.journal(), header_of(f.spec) + "\n" + f.rows(2) + header_of(b) + "\n" + brows[2] + "\n");
  try {
    f.run();
    FAIL() << "a journal mixing two grids was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a second header, of another grid"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out.jsonl.journal:4"), std::string::npos) << e.what();
  }
  // Rows of another grid of the same size under this grid's header: their inputs differ.
  write_text(f.journal(), header_of(f.spec) + "\n" + f.rows(2) + brows[2] + "\n");
  try {
    f.run();
    FAIL() << "a row of another grid was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a row of this grid"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(f.dir / "out.jsonl"));
}

TEST(SweepJournal, JournalThatIsNotARegularFileIsRejected) {
  // /dev/full reads as endless zero bytes: it must be refused, not read.
  EXPECT_THROW(io::read_journal("/dev/full", 1, 8), InputError);
  EXPECT_THROW(io::read_journal(fs::temp_directory_path(), 1, 8), InputError);
}

TEST(SweepJournal, FailedAppendIsAnError) {
  // /dev/full takes the open and fails every write with ENOSPC, as a full disk does.
  io::JournalAppender j("/dev/full");
  try {
    j.append("{\"grid_hash\":\"0\"}");
    FAIL() << "a failed journal write was ignored";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot append to the journal"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(ENOSPC)), std::string::npos) << e.what();
  }
}

TEST(WriteFileAtomic, RemovesTempFilesOfDeadProcessesOnly) {
  const fs::path dir = fs::temp_directory_path() / "capsim-stale-temps";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // PIDs above the kernel's limit (2^22) never run; PID 1 always does.
  write_text(dir / ".out.json.tmp2147483646", "partial");
  write_text(dir / ".out.json.tmp1", "a live writer's");
  write_text(dir / ".out.json.tmpx", "not a temporary file");
  write_text(dir / ".other.json.tmp2147483646", "another file's");
  io::write_file_atomic(dir / "out.json", "{}\n");
  EXPECT_EQ(io::read_text_file(dir / "out.json"), "{}\n");
  EXPECT_FALSE(fs::exists(dir / ".out.json.tmp2147483646"));
  EXPECT_TRUE(fs::exists(dir / ".out.json.tmp1"));
  EXPECT_TRUE(fs::exists(dir / ".out.json.tmpx"));
  EXPECT_TRUE(fs::exists(dir / ".other.json.tmp2147483646"));
  EXPECT_FALSE(fs::exists(dir / (".out.json.tmp" + std::to_string(::getpid()))));
}

TEST(Search, DeterministicAcrossThreadCounts) {
  const Scenario sc = io::load_scenario(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "llama3-8b-h100.json");
  const hw::RooflineCostModel cost(sc.system);
  SearchOptions one;
  one.threads = 1;
  SearchOptions two = one;
  two.threads = 2;
  const SearchResult a = search_training(sc, cost, one), b = search_training(sc, cost, two);
  ASSERT_FALSE(a.top.empty());
  EXPECT_EQ(a.top, b.top);
  EXPECT_EQ(a.pareto, b.pareto);
  EXPECT_EQ(a.enumerated, a.pruned_divisibility + a.pruned_memory + a.evaluated);
  for (size_t i = 1; i < a.top.size(); ++i) EXPECT_LE(a.top[i - 1].step_s, a.top[i].step_s);
  for (const auto& c : a.top) EXPECT_LE(c.peak_memory_bytes, c.capacity_bytes);
}

// The cancel flag: unset, the search is the same as without one; set, the workers stop
// before their next layout and the search throws instead of returning a partial ranking.
TEST(Search, CancelFlagStopsTheSearch) {
  const Scenario sc = io::load_scenario(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "llama3-8b-h100.json");
  const hw::RooflineCostModel cost(sc.system);
  SearchOptions opt;
  opt.threads = 2;
  std::atomic<bool> cancel{false};
  SearchOptions with_flag = opt;
  with_flag.cancel = &cancel;
  const SearchResult a = search_training(sc, cost, opt), b = search_training(sc, cost, with_flag);
  EXPECT_EQ(a.top, b.top);
  EXPECT_EQ(a.pareto, b.pareto);
  EXPECT_EQ(a.enumerated, b.enumerated);
  cancel = true;
  EXPECT_THROW(search_training(sc, cost, with_flag), SearchCancelled);
  with_flag.threads = 1;
  EXPECT_THROW(search_training(sc, cost, with_flag), SearchCancelled);
}

/// The default cost model, counting its calls; the `at`-th call sets the cancel flag.
class CancellingCost : public CostModel {
 public:
  CancellingCost(const SystemSpec& s, std::atomic<bool>& cancel, int64_t at) : inner_(s), cancel_(cancel), at_(at) {}
  Seconds gemm(int64_t m, int64_t n, int64_t k, DType d, int64_t b) const override {
    return tick(inner_.gemm(m, n, k, d, b));
  }
  Seconds gemm_compute(int64_t m, int64_t n, int64_t k, DType d, int64_t b) const override {
    return tick(inner_.gemm_compute(m, n, k, d, b));
  }
  Seconds attention(const AttentionShape& a, bool backward) const override {
    return tick(inner_.attention(a, backward));
  }
  Seconds memory_bound(Bytes bytes) const override { return tick(inner_.memory_bound(bytes)); }
  Seconds collective(CollectiveKind k, Bytes bytes, const Group& g) const override {
    return tick(inner_.collective(k, bytes, g));
  }
  Seconds p2p(Bytes bytes, bool cross_node) const override { return tick(inner_.p2p(bytes, cross_node)); }
  std::vector<std::pair<std::string, std::string>> provenance() const override { return inner_.provenance(); }
  int64_t calls() const { return calls_; }

 private:
  Seconds tick(Seconds s) const {
    if (++calls_ == at_) cancel_ = true;
    return s;
  }
  hw::RooflineCostModel inner_;
  std::atomic<bool>& cancel_;
  int64_t at_;
  mutable std::atomic<int64_t> calls_{0};
};

// Cancelled in the middle of the costing, the workers stop before their next layout: the
// cost model sees hardly any call after the flag is set.
TEST(Search, CancelStopsTheWorkersMidSearch) {
  const Scenario sc = io::load_scenario(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "llama3-8b-h100.json");
  std::atomic<bool> never{false};
  const CancellingCost counting(sc.system, never, -1);
  SearchOptions opt;
  opt.gpu_counts = {64, 128, 256};
  opt.threads = 2;
  search_training(sc, counting, opt);
  const int64_t whole = counting.calls();
  ASSERT_GT(whole, 10000);
  std::atomic<bool> cancel{false};
  const int64_t at = whole / 10;
  const CancellingCost cost(sc.system, cancel, at);
  opt.cancel = &cancel;
  EXPECT_THROW(search_training(sc, cost, opt), SearchCancelled);
  EXPECT_TRUE(cancel);
  // Each worker finishes the layout it is costing, no more.
  EXPECT_LT(cost.calls() - at, whole / 100) << cost.calls() << " calls of " << whole;
}

}  // namespace
}  // namespace capsim

#include "capsim/core/plan.hpp"
#include "capsim/core/train.hpp"
#include "capsim/io/plan_io.hpp"

namespace capsim {
namespace {

const CostModelFactory kCosts = [](const SystemSpec& s) -> std::unique_ptr<CostModel> {
  return std::make_unique<hw::RooflineCostModel>(s);
};

// The same GPU offered at two prices: the cheaper offer wins at the same size and layout,
// and the report's days, GPU-hours and cost are consistent.
TEST(Plan, TrainingPicksTheCheaperOffer) {
  io::PlanRequest req = io::load_plan(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "plan-train-llama3-70b.json");
  req.offers.resize(1);
  req.offers.push_back(req.offers.front());
  req.offers[0].usd_per_gpu_hour = 3.0;
  req.offers[1].usd_per_gpu_hour = 2.0;
  req.train_goal.gpu_counts = {1024, 2048};
  const auto options = plan_training(req.base, req.offers, req.train_goal, kCosts, 2);
  ASSERT_EQ(options.size(), 2u);
  EXPECT_DOUBLE_EQ(options[0].cost_usd * 3.0, options[1].cost_usd * 2.0);
  for (const auto& o : options) {
    EXPECT_NEAR(o.gpu_hours, o.days * 24.0 * static_cast<double>(o.layout.num_gpus), 1e-6 * o.gpu_hours);
    EXPECT_EQ(o.feasible, o.days <= req.train_goal.deadline_days);
    // Wall clock: the steps stretched by the interruptions the cluster expects.
    EXPECT_DOUBLE_EQ(o.effective_fraction, effective_training_fraction(o.layout.num_gpus));
    EXPECT_NEAR(o.days, req.train_goal.tokens / o.layout.tokens_per_s / o.effective_fraction / 86400.0, 1e-9 * o.days);
  }
  // A stated share replaces the model.
  req.train_goal.effective_fraction = 1.0;
  const auto stated = plan_training(req.base, req.offers, req.train_goal, kCosts, 2);
  for (const auto& o : stated) EXPECT_DOUBLE_EQ(o.effective_fraction, 1.0);
}

// A training goal's precision left "auto": each offer's layout is the faster of its bf16
// and fp8 layouts, so on an H100 it is never slower than the bf16 plan's, and the A100
// (no FP8 tensor cores) keeps bf16.
TEST(Plan, TrainingPrecisionAutoSearchesBoth) {
  io::PlanRequest req = io::load_plan(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "plan-train-llama3-70b.json");
  req.train_goal.gpu_counts = {1024};
  const auto bf16 = plan_training(req.base, req.offers, req.train_goal, kCosts, 2);
  req.base.training->precision_auto = true;
  const auto either = plan_training(req.base, req.offers, req.train_goal, kCosts, 2);
  ASSERT_EQ(either.size(), bf16.size());
  std::map<std::string, double> bf16_step;  // the options are ranked, so matched by GPU
  for (const auto& o : bf16)
    if (o.layout.num_gpus > 0) bf16_step[o.gpu] = o.layout.step_s;
  int compared = 0;
  for (const auto& o : either) {
    if (o.layout.num_gpus == 0 || !bf16_step.count(o.gpu)) continue;
    ++compared;
    EXPECT_LE(o.layout.step_s, bf16_step[o.gpu]) << o.gpu;
    if (o.gpu.rfind("a100", 0) == 0) {
      EXPECT_EQ(o.layout.plan.precision, DType::bf16);
      EXPECT_DOUBLE_EQ(o.layout.step_s, bf16_step[o.gpu]);
    }
  }
  EXPECT_EQ(compared, 3);
}

TEST(Plan, ServingReplicasCoverTheTraffic) {
  const io::PlanRequest req = io::load_plan(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "plan-serve-llama3-8b.json");
  const auto options = plan_serving(req.base, req.offers, req.serve_goal, kCosts);
  ASSERT_FALSE(options.empty());
  for (const auto& o : options) {
    if (!o.feasible) continue;
    EXPECT_GE(static_cast<double>(o.replicas) * o.qps_per_replica, req.serve_goal.qps);
    EXPECT_LT(static_cast<double>(o.replicas - 1) * o.qps_per_replica, req.serve_goal.qps);
  }
  for (size_t i = 1; i < options.size(); ++i) {
    if (options[i].feasible) {
      EXPECT_LE(options[i - 1].usd_per_hour, options[i].usd_per_hour);
    }
  }
  // Colocated and disaggregated units both appear; a unit's GPUs count its prefill and decode replicas.
  bool coloc = false, disagg = false;
  for (const auto& o : options) {
    (o.prefill > 0 ? disagg : coloc) = true;
    EXPECT_EQ(o.gpus_per_replica, o.tp * (o.prefill > 0 ? o.prefill + o.decode : 1));
    if (o.feasible) {
      EXPECT_NEAR(o.usd_per_hour, static_cast<double>(o.replicas * o.gpus_per_replica) *
                                      (o.gpu == "h100-sxm5-80gb" ? 4.916 : 1.844), 1e-9);
    }
  }
  EXPECT_TRUE(coloc && disagg);
}

TEST(Plan, ServingTriesExpertParallelForMoe) {
  io::PlanRequest req = io::load_plan(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "plan-serve-llama3-8b.json");
  req.base.model = io::load_model("mixtral-8x7b");
  req.offers.resize(1);  // h100
  req.serve_goal.tp = {2};
  req.serve_goal.weight_dtypes = {DType::fp8};
  req.serve_goal.disaggregation.clear();
  req.serve_goal.qps = 5;
  const auto options = plan_serving(req.base, req.offers, req.serve_goal, kCosts);
  ASSERT_EQ(options.size(), 2u);
  EXPECT_EQ(options[0].ep + options[1].ep, 3);  // ep 1 and ep 2
}
}  // namespace
}  // namespace capsim
