#pragma once
/// Serving steps: an engine's step times recovered from a benchmark's saved per-request
/// token times (`capsim calibrate serving-steps`), against the serving scenario's model, with
/// the host time per step that fits them and a button that puts it in the scenario.

#include <QPointF>
#include <QString>
#include <QWidget>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

class QChart;
class QLabel;
class QPushButton;

namespace capsim::gui {

class ServingStepsView : public QWidget {
  Q_OBJECT

 public:
  /// Empty until a result is shown.
  explicit ServingStepsView(QWidget* parent = nullptr);

  /// Show `report` (io::analyze_serving_steps) of the file at `path`; a non-empty `error`
  /// (the file did not read) clears the chart and shows the command line's message.
  void show_report(const QString& path, const nlohmann::json& report, const QString& error = {});
  /// The error line; empty when the file read.
  QString error() const;
  /// The line counting the requests placed and the steps recovered, with the report's notes.
  QString info() const;
  /// The fitted host time's line; empty without a scenario's prediction.
  QString fit_text() const;
  /// The fitted host time per step, ms (the report's fit), where there is one.
  std::optional<double> fitted_host_ms() const { return fitted_ms_; }
  /// The fitted host time per layer of a step run without a CUDA graph, us, where there is one.
  std::optional<double> fitted_eager_us() const { return fitted_eager_us_; }
  /// The chart's series `name` ("measured", "model"): (mean running requests, median ms) of
  /// the decode-only rows.
  std::vector<QPointF> points(const QString& name) const;

 signals:
  /// The user asked to open a benchmark result.
  void open_requested();
  /// The user asked to put the fitted host times in the serving scenario: per step, and per
  /// layer of a step without a CUDA graph (below 0: none was fitted).
  void apply_requested(double host_ms, double eager_us_per_layer);

 private:
  QLabel* path_ = nullptr;
  QLabel* error_ = nullptr;
  QLabel* info_ = nullptr;
  QLabel* fit_ = nullptr;
  QPushButton* open_ = nullptr;
  QPushButton* apply_ = nullptr;
  QChart* chart_ = nullptr;
  std::optional<double> fitted_ms_;
  std::optional<double> fitted_eager_us_;
};

}  // namespace capsim::gui
