#pragma once
/// Progress of a long command on a terminal: one line on stderr, rewritten with \r, saying
/// what is being done, done/total, the rate, the ETA and the elapsed time. It appears only
/// when stderr is a terminal and the run has lasted ~2 s, is redrawn a few times a second
/// by one ticker thread (the workers only advance atomic counters), and ends with a
/// newline. When stderr is not a terminal nothing is written and no thread is started.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "capsim/core/progress.hpp"

namespace capsim::io {

/// "9 s", "2 min 05 s", "1 h 02 min": seconds rounded for a progress line.
std::string progress_duration(double seconds);

/// The text of a progress line (no \r, no newline), e.g.
/// "validate cases.json 12/40 cases, 3.1/s, ETA 9 s, 4 s elapsed". `phase_s` is how long
/// the current phase has run (the rate counts `done - done_before` units over it); the
/// ETA is left out while nothing is done or the total is unknown (0), and once done.
std::string progress_line(std::string_view what, std::string_view unit, int64_t done, int64_t total, int64_t done_before,
                          double phase_s, double elapsed_s);

/// Whether a progress line is on the terminal without its newline yet (read by a signal
/// handler, which then starts its message on a fresh line).
bool progress_line_open();

class ProgressReporter {
 public:
  struct Options {
    bool terminal = false;                          ///< draw at all (the CLI: isatty(stderr))
    std::function<void(const std::string&)> write;  ///< default: stderr
    std::function<double()> clock;                  ///< seconds; default: steady clock
    double delay_s = 2.0;                           ///< nothing shows before the run has lasted this long
    double interval_s = 0.25;                       ///< between redraws
    bool ticker = true;                             ///< a thread redraws; off: tick() by hand
  };
  /// The CLI's reporter: draws only when stderr is a terminal.
  ProgressReporter(std::string what, std::string unit);
  ProgressReporter(std::string what, std::string unit, Options opt);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  /// The counters to hand to core; nullptr when nothing is drawn, so that core skips
  /// counting altogether.
  ProgressCounter* counter() { return opt_.terminal ? &counter_ : nullptr; }
  bool active() const { return opt_.terminal; }

  /// A new phase (another file, another stage): its label, unit and total; `done` restarts
  /// at `already_done` (work done before this run, e.g. resumed rows, not in the rate).
  void phase(std::string what, std::string unit, int64_t total = 0, int64_t already_done = 0);

  /// Redraws when due (the ticker calls it; tests call it with the ticker off).
  void tick();
  /// Stops the ticker; a line that was shown gets its final state and a newline.
  void finish();

 private:
  std::string render_locked(double now) const;
  void draw_locked(const std::string& line);

  Options opt_;
  ProgressCounter counter_;
  mutable std::mutex mu_;  // label, unit, phase start, what was drawn
  std::string what_, unit_;
  int64_t done_before_ = 0;
  double start_ = 0, phase_start_ = 0, last_draw_ = -1;
  size_t drawn_width_ = 0;
  bool shown_ = false, finished_ = false;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread ticker_;
};

}  // namespace capsim::io
