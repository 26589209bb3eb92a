#pragma once
/// Serving results: run control (run, cancel, a busy bar), TTFT/TPOT/ITL/E2E percentiles
/// as a table and a chart, throughput.

#include <QWidget>

#include "evaluation.hpp"

class QChart;
class QLabel;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace capsim::gui {

/// Shows one serving outcome and the state of the run in flight.
class ServingView : public QWidget {
  Q_OBJECT

 public:
  /// Empty table and chart, no run in flight.
  explicit ServingView(QWidget* parent = nullptr);

  /// A run started: the busy bar shows, Cancel is enabled, old figures are greyed out.
  void show_running();
  /// The run was cancelled or its input is invalid: clear the figures, say `why`.
  void show_idle(const QString& why);
  /// Draw a finished run.
  void show_outcome(const ServingOutcome& outcome);
  /// The table cell of `metric` (ttft, tpot, itl, e2e) and `column` (mean, p50, p90, p99),
  /// in milliseconds as shown; NaN when the table is empty.
  double cell(const QString& metric, const QString& column) const;
  /// The status line.
  QString status() const;
  /// Whether a run is shown as in flight.
  bool running() const;

 signals:
  /// The user asked for a run now.
  void run_requested();
  /// The user asked to stop waiting for the run in flight.
  void cancel_requested();

 private:
  void clear_figures();
  QTableWidget* table_ = nullptr;
  QChart* chart_ = nullptr;
  QLabel* status_ = nullptr;
  QProgressBar* busy_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* cancel_ = nullptr;
};

}  // namespace capsim::gui
