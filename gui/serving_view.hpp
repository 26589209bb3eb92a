#pragma once
/// Serving results: run control (run, cancel, a busy bar), TTFT/TPOT/ITL/E2E percentiles
/// as a table and a chart, throughput; KV-cache use and the running batch over the first
/// run's time; P99 latency against the arrival rate with the SLA
/// and the highest rate that meets it.

#include <QPointF>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "evaluation.hpp"

class QChart;
class QDoubleSpinBox;
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
  /// The line under the table: where the run's engine time went; empty without a run.
  QString time_by_part() const;
  /// How that line names a part of the report's busy_by_part (io::busy_shares).
  static QString part_label(const std::string& part);
  /// Whether a run is shown as in flight.
  bool running() const;

  /// The points of the over-time chart's series "KV cache" (seconds, percent of blocks in
  /// use) or "batch" (seconds, sequences decoding); empty when no run is shown.
  std::vector<QPointF> over_time_points(const QString& name) const;
  /// What hovering the over-time chart at `seconds` shows: the nearest point's time, KV-cache
  /// use and batch; empty when no run is shown.
  QString over_time_hover(double seconds) const;

  /// The SLA set above the latency-vs-QPS chart.
  ServingSla sla() const;
  /// Set the SLA fields.
  void set_sla(const ServingSla& sla);
  /// A latency-vs-QPS run started.
  void show_qps_running();
  /// The latency-vs-QPS run has run `done` of about `total` probes (total 0: not known yet).
  void show_qps_progress(qint64 done, qint64 total);
  /// No curve: say `why`.
  void show_qps_idle(const QString& why);
  /// Draw a finished latency-vs-QPS run.
  void show_qps(const QpsCurve& curve);
  /// The points of the QPS chart's series `name` ("TTFT p99", "TPOT p99", "TTFT SLA",
  /// "TPOT SLA", "max QPS"): (requests/s, ms).
  std::vector<QPointF> qps_points(const QString& name) const;
  /// The QPS chart's series names.
  QStringList qps_series() const;
  /// The line under the QPS chart.
  QString qps_status() const;
  /// Whether a latency-vs-QPS run is shown as in flight.
  bool qps_running() const;
  /// Press the latency-vs-QPS run's Cancel button (as a user would).
  void click_qps_cancel();

 signals:
  /// The user asked for a latency-vs-QPS run.
  void qps_requested();
  /// The user asked for a run now.
  void run_requested();
  /// The user asked to stop the run in flight.
  void cancel_requested();
  /// The user asked to stop the latency-vs-QPS run in flight.
  void qps_cancel_requested();

 private:
  void clear_figures();
  void clear_over_time();
  void show_over_time(const ServingOverTime& t);
  QTableWidget* table_ = nullptr;
  QChart* chart_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* time_ = nullptr;  ///< where the run's engine time went
  QProgressBar* busy_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QChart* time_chart_ = nullptr;
  ServingOverTime over_time_;  ///< what the over-time chart draws
  QChart* qps_chart_ = nullptr;
  QLabel* qps_status_ = nullptr;
  QPushButton* qps_run_ = nullptr;
  QPushButton* qps_cancel_ = nullptr;
  QDoubleSpinBox* ttft_sla_ = nullptr;
  QDoubleSpinBox* tpot_sla_ = nullptr;
};

}  // namespace capsim::gui
