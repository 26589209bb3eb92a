#pragma once
/// `capsim sweep`: a base scenario and axes (any scenario key path) expand to a grid of
/// rows; rows run on all cores and are journaled as they finish so an interrupted sweep
/// resumes without redoing them; shards split the grid deterministically over machines;
/// `capsim merge` joins the parts after checking they belong to one grid and cover it.

#include <atomic>

#include "capsim/core/calibration.hpp"
#include <filesystem>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace capsim::io {

/// Most rows one sweep may have (checked before the grid is expanded): a larger grid is
/// most likely a range with a step far too small.
inline constexpr size_t kMaxSweepRows = 10'000'000;

/// One axis: a key path and its values (several paths move together in a zip).
struct SweepAxis {
  std::vector<std::string> paths;
  std::vector<std::vector<std::string>> values;  ///< values[k][i]: the k-th path's i-th value (JSON text)
  size_t size() const { return values.empty() ? 0 : values.front().size(); }
};

struct SweepSpec {
  std::filesystem::path base_dir;
  std::string base_text;            ///< the base scenario document (JSON text)
  std::vector<SweepAxis> axes;
  std::vector<std::string> outputs; ///< report paths to keep in each row (dotted)
  uint64_t grid_hash = 0;           ///< FNV-1a of the base and the axes
  size_t rows() const;
  /// The --set overrides of row `index` (mixed radix over the axes, last axis fastest).
  std::vector<std::string> overrides(size_t index) const;
};

/// Read and check a sweep file: unknown keys in axis paths, empty axes and bad values are
/// reported (all at once) before any row runs.
SweepSpec load_sweep(const std::filesystem::path& path);

struct ShardSpec {
  size_t index = 0, count = 1;
};

/// `--shard i/N`, else SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT, else
/// JOB_COMPLETION_INDEX with CAPSIM_SHARD_COUNT; 0/1 when none is set.
ShardSpec resolve_shard(const std::string& flag);

struct SweepRun {
  std::filesystem::path out;   ///< rows file (.jsonl or .csv); parts are named from it when sharded
  ShardSpec shard;
  unsigned threads = 1;
  bool progress = false;       ///< draw progress on stderr (io::ProgressReporter)
  std::atomic<bool>* stop = nullptr;  ///< set to stop early (rows done so far stay journaled)
  const CalibrationProfile* calibration = nullptr;  ///< cost model profile for every row
};

struct SweepSummary {
  size_t rows_total = 0, rows_this_shard = 0, ok = 0, failed = 0, skipped_resumed = 0;
  size_t does_not_fit = 0;  ///< rows answered "does not fit" (not counted as ok)
  bool interrupted = false;
  std::filesystem::path rows_file, summary_file;
};

/// The rows an interrupted run of the grid `grid_hash` (of `rows_total` rows) journaled,
/// by index. A missing journal holds no rows. A last line cut short by a kill is dropped
/// (its row runs again); so is a first line that is this grid's header cut short. A journal
/// of another grid, a second header of another grid, a journal that is not a regular file,
/// or a line that is not a row of this grid (with `spec`: also a row whose inputs differ
/// from the grid's row of that index) throws InputError.
std::map<size_t, nlohmann::json> read_journal(const std::filesystem::path& journal, uint64_t grid_hash,
                                              size_t rows_total, const SweepSpec* spec = nullptr);

/// A sweep journal open for appending: each line is written whole with its newline at
/// once, so a killed process leaves at most that line cut short. A failed write (disk
/// full) throws InputError naming the journal and the reason.
class JournalAppender {
 public:
  explicit JournalAppender(std::filesystem::path path);
  ~JournalAppender();
  JournalAppender(const JournalAppender&) = delete;
  JournalAppender& operator=(const JournalAppender&) = delete;
  void append(std::string_view line);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

/// Run (or resume) the rows of this shard. Each finished row is appended to
/// `<rows file>.journal` at once; at the end the rows file and a `.summary.json` are
/// written atomically and the journal removed.
SweepSummary run_sweep(const SweepSpec& spec, const SweepRun& run);

/// Join part files (each with its .summary.json): same grid hash and shard count, every
/// shard present once, every row present once. Writes `out` atomically.
void merge_parts(const std::vector<std::filesystem::path>& parts, const std::filesystem::path& out);

}  // namespace capsim::io
