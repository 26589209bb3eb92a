#pragma once
/// `capsim-gui --bench-repaint N`: how long the Training tab takes to recompute and repaint
/// after a scenario edit, as the median and 90th percentile over N edits;
/// `--bench-serving-repaint N`: the same for the Serving tab, its simulation included.

#include <QString>
#include <vector>

namespace capsim::gui {

class MainWindow;

/// Milliseconds of each timed edit.
struct RepaintTimes {
  std::vector<double> recompute_ms;  ///< the edit until the Training tab holds the new report
  std::vector<double> total_ms;      ///< the edit until the window is repainted
};

/// Show the Training tab of `w` and time `edits` edits of its tensor-parallel size
/// (alternating 1 and 2 on 8 GPUs): each the spin box's new value, the analytical
/// evaluation, the tab's tables and charts, then pending events and a synchronous repaint
/// of the window. Two untimed edits warm the caches first.
RepaintTimes time_training_repaints(MainWindow& w, int edits);

/// Show the Serving tab of `w` and time `edits` edits of its tensor-parallel size
/// (alternating 1 and 2 on 8 GPUs, the default workload): each the spin box's new value, a
/// run started at once (no typing pause), the replicated simulation on a worker thread,
/// the tab's table and charts, then pending events and a synchronous repaint. One untimed
/// edit warms up first. `recompute_ms` is the edit until the tab shows the new result.
RepaintTimes time_serving_repaints(MainWindow& w, int edits);

/// The lines `--bench-serving-repaint` prints: machine, edits, median and p90 of both timings.
QString serving_repaint_summary(const RepaintTimes& t);

/// The machine the figures are from: OS, CPU model, logical cores, Qt platform.
QString machine_description();

/// The lines `--bench-repaint` prints: machine, edits, median and p90 of both timings.
QString repaint_summary(const RepaintTimes& t);

}  // namespace capsim::gui
