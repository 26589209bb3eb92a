#pragma once
/// Training results: memory per GPU as a stacked bar per pipeline stage against the GPU's
/// capacity, where the step time goes, with MFU and tokens/s, and the operators of one
/// microbatch.

#include <QWidget>
#include <vector>

#include "evaluation.hpp"

class QBarSet;
class QChart;
class QLabel;
class QTableWidget;

namespace capsim::gui {

/// Charts and figures of one training evaluation.
class TrainingView : public QWidget {
  Q_OBJECT

 public:
  /// Empty charts until the first show_outcome.
  explicit TrainingView(QWidget* parent = nullptr);

  /// Draw `outcome`; an outcome with issues clears the charts and says why.
  void show_outcome(const TrainingOutcome& outcome);

  /// The bar heights of one memory component ("weights", "gradients", "optimizer",
  /// "activations", "other") per stage, GiB; empty when nothing is drawn.
  std::vector<double> memory_values(const QString& component) const;
  /// The capacity line's height (GiB); 0 when nothing is drawn.
  double capacity_line() const;
  /// The verdict line under the memory chart ("fits ...", "does not fit ...").
  QString verdict() const;
  /// The notes under the step chart: the layout, the MoE dispatch, what auto chose, warnings.
  QString notes() const;
  /// The step-time bar's segments in seconds, in the order compute, recompute, exposed
  /// TP, CP, EP, PP, DP communication, bubble, optimizer; empty when nothing is drawn.
  std::vector<double> step_values() const;
  /// The throughput line (step time, MFU, tokens/s) and, with a token budget, the
  /// report's days, GPU-hours, cost and energy; for a layout that does not fit, the single
  /// changes that would make it fit instead.
  QString summary() const;
  /// The operators table (one microbatch, `capsim train --ops`): one row per operator,
  /// largest pass time first, communication rows last; each row's cells as shown
  /// (operator, block, runs, pass ms, share, forward TFLOP/s). Empty when nothing is drawn.
  std::vector<QStringList> operator_rows() const;

 private:
  void clear(const QString& why);
  QChart* memory_chart_ = nullptr;
  QChart* step_chart_ = nullptr;
  QLabel* verdict_ = nullptr;
  QLabel* summary_ = nullptr;
  QLabel* notes_ = nullptr;
  QTableWidget* operators_ = nullptr;
};

}  // namespace capsim::gui
