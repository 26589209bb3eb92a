#pragma once
/// Arguments of each capsim subcommand.

#include <cstdint>
#include <string>
#include <vector>

namespace capsim::cli {

/// Most worker threads --threads may ask for: far above any machine's cores, well below
/// where starting threads fails.
inline constexpr unsigned kMaxThreads = 1024;

struct ModelArgs {
  std::string name;
  int64_t seq_len = 4096;
  std::string format;
  std::string out;
};

struct TrainArgs {
  std::string scenario;
  std::string calibration;  ///< profile JSON (capsim calibrate fit)
  std::string engine = "analytical";
  std::string trace;
  std::vector<std::string> sets;
  std::string format;
  std::string out;
  bool ops = false;  ///< --ops: the operators of one microbatch (operator_times)
};

struct InferArgs {
  std::string scenario;
  std::string calibration;  ///< profile JSON (capsim calibrate fit)
  std::vector<std::string> sets;
  std::string format;
  std::string out;
  bool max_qps = false;
  std::string trace;
  double ttft_p99_ms = 500;
  double tpot_p99_ms = 50;
  uint64_t seed = 20261129;
  /// One iteration instead of a run (--step-decodes, --step-context, --step-prompt,
  /// --step-prompt-cached); -1: not given.
  int64_t step_decodes = -1, step_context = -1, step_prompt = -1, step_prompt_cached = -1;
};

int run_infer(const InferArgs& a);

struct SearchArgs {
  std::string scenario;
  std::string calibration;  ///< profile JSON (capsim calibrate fit)
  std::vector<std::string> sets;
  std::vector<int64_t> gpus;
  size_t top = 10;
  std::string rank = "step";
  bool schedules = false;
  unsigned threads = 0;
  size_t des_recheck = 3;
  std::string format;
  std::string out;
};

int run_search(const SearchArgs& a);

struct SweepArgs {
  std::string file;
  std::string calibration;  ///< profile JSON (capsim calibrate fit)
  std::string out;
  std::string shard;
  unsigned threads = 0;
};

int run_sweep(const SweepArgs& a);
int run_merge(const std::vector<std::string>& parts, const std::string& out);
int run_plan(const std::string& file, const std::string& format, const std::string& out);

struct ValidateArgs {
  std::vector<std::string> files;
  std::string calibration;  ///< profile JSON (capsim calibrate fit)
  std::string format;
  std::string out;
  std::vector<std::string> group_by;  ///< source, engine, gpu, model, mode
  std::string baseline;               ///< an earlier `validate --format json` report
  std::vector<std::string> only;      ///< case id globs of a what-if
  std::vector<std::string> sets;      ///< path=value overrides of a what-if
};

int run_validate(const ValidateArgs& a);

struct CalibrateArgs {
  std::vector<std::string> inputs;
  std::string out;
  std::string op;      ///< import-nccl-tests: the collective when the log does not say
  std::string format;
  std::string gpu;            ///< compare: GPU preset
  int64_t gpus_per_node = 8;  ///< compare
  double nic_gbps = 400;      ///< compare: scale-out Gb/s per GPU
  std::string scenario;       ///< serving-steps: the deployment whose steps are predicted beside
  int64_t bucket = 8;         ///< serving-steps: running requests per row of decode steps
  size_t run = 0;             ///< serving-steps: the run of a JSON Lines file (1-based; 0: not given)
  std::string calibration;    ///< serving-steps: profile JSON in front of the default model (capsim calibrate fit)
};
int run_calibrate_serving_steps(const CalibrateArgs& a);
int run_calibrate_compare(const CalibrateArgs& a);
int run_calibrate_fit(const CalibrateArgs& a);
int run_calibrate_import(const CalibrateArgs& a);
int run_calibrate_show(const CalibrateArgs& a);
int run_calibrate_shapes(const CalibrateArgs& a);
int run_model(const ModelArgs& a);
int run_train(const TrainArgs& a);
int run_memory(const TrainArgs& a);
int run_list(const std::string& what);

}  // namespace capsim::cli
