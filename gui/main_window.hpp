#pragma once
/// The capsim-gui main window: the scenario editor beside the results of its front tab;
/// training results follow every edit, serving runs on a worker thread.

#include <QMainWindow>
#include <QString>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capsim/core/calibration.hpp"
#include "capsim/core/progress.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/search.hpp"
#include "scenario_panel.hpp"

class QGraphicsView;
class QLabel;
class QMenu;
class QStackedWidget;
class QTabWidget;
class QTimer;

namespace capsim::gui {

class CalibrationView;
class ServingStepsView;
class CompareView;
class SearchView;
class ServingView;
class TimelineView;
class TrainingView;
class ValidationView;

/// Editor, results, file menu, settings.
class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  /// Restores geometry and recent files from QSettings and evaluates the default scenarios.
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// The scenario editor.
  ScenarioPanel* panel() const { return panel_; }
  /// The training results.
  TrainingView* training_view() const { return training_view_; }
  /// The serving results.
  ServingView* serving_view() const { return serving_view_; }

  /// The pinned report against the current one of its kind.
  CompareView* compare_view() const { return compare_view_; }
  /// The calibration profile against the default model.
  CalibrationView* calibration_view() const { return calibration_view_; }
  ServingStepsView* serving_steps_view() const { return serving_steps_view_; }
  /// The layout search.
  SearchView* search_view() const { return search_view_; }
  /// The discrete-event timeline of the training step.
  TimelineView* timeline_view() const { return timeline_view_; }
  /// The validation results.
  ValidationView* validation_view() const { return validation_view_; }
  /// The result tabs: the scenario's results, then the tools beside them.
  QTabWidget* views() const { return views_; }

  /// Open a scenario file (the CLI's format); problems go to the status bar. True on success.
  bool open_file(const QString& path);
  /// Save the front tab's scenario document to `path`. True on success.
  bool save_file(const QString& path);
  /// Write the front tab's report (the CLI's JSON) to `path`; false when there is none.
  bool export_report(const QString& path);
  /// Write the front tab's report as CSV (report_csv: key,value,unit) to `path`; false
  /// when there is none.
  bool export_report_csv(const QString& path);
  /// The charts the front tab shows (chart views and the timeline), top to bottom.
  QList<QGraphicsView*> visible_charts() const;
  /// A chart's name for menus and file names: its title, else its object name.
  static QString chart_name(const QGraphicsView* view);
  /// Write chart `index` of visible_charts() to `path`: SVG when `path` ends in .svg,
  /// else PNG. False when there is no such chart or the write fails.
  bool export_chart(const QString& path, int index = 0);
  /// The front tab's report as `capsim train`/`capsim infer --format json` prints it;
  /// empty while there is none (invalid input, serving run in flight or cancelled).
  QString current_report() const;
  /// Start a serving run of the current serving document now (stale runs are dropped).
  void run_serving_now();
  /// Stop the serving run in flight (it ends before its next simulated replication; its
  /// result, if any, is dropped).
  void cancel_serving();
  /// Find the serving deployment's highest rate within the SLA set in the serving view and
  /// the P99 latencies around it, on a worker thread (a run in flight is dropped).
  void run_qps_now();
  /// Stop the latency-vs-QPS run in flight (before its next simulated run) and show that
  /// it was cancelled.
  void cancel_qps();
  /// Search the training scenario's layouts on a worker thread (as `capsim search`).
  void run_search_now();
  /// Stop the search in flight: its workers end before their next layout and nothing shows.
  void cancel_search();
  /// Put `c`'s layout into the training scenario and show its results.
  void use_layout(const SearchCandidate& c);
  /// Run the training scenario's step on the discrete-event engine on a worker thread.
  void run_timeline_now();
  /// Write the last timeline's Chrome/Perfetto trace to `path`; false when there is none.
  bool export_trace(const QString& path);
  /// Predict the cases of `files` (data/validation/*.json when empty) on a worker thread;
  /// a run in flight is dropped.
  void run_validation_now(const QStringList& files = {});
  /// Load case `id` of the validation file named `file` (a file of the last validation run)
  /// into the editor as a scenario of its kind, and show its results. False when the case
  /// is not found or its file does not read.
  bool load_validation_case(const QString& file, const QString& id);
  /// Keep the front scenario's current report (training, or serving once its run is shown)
  /// to compare later edits against; false when there is none (the input has problems or
  /// the serving run is not finished).
  bool pin_report();
  /// The kind of the pinned report (meaningful while one is pinned).
  ScenarioKind pinned_kind() const { return pinned_kind_; }
  /// Drop the pinned report.
  void unpin_report();
  /// Show the calibration profile at `path` against the default model of the training
  /// scenario's system; a profile that does not read shows the command line's message.
  /// True when it read. A profile that reads replaces the one in use for predictions.
  bool open_calibration(const QString& path);
  /// Recover the steps of the serving benchmark result at `path` (capsim calibrate
  /// serving-steps) and price them with the serving scenario where it reads; shows the
  /// "Serving steps" tab. True when the file read.
  bool open_serving_result(const QString& path);
  /// Put `host_ms` in the serving scenario as inference.engine.step_overhead_ms and, when it
  /// is 0 or more, `eager_us_per_layer` as inference.engine.eager_host_us_per_layer.
  void apply_step_overhead(double host_ms, double eager_us_per_layer = -1.0);
  /// Use the loaded calibration profile for training and serving predictions (as the
  /// CLI's `--calibration FILE`) or the default cost model; ignored while none is loaded.
  void set_use_calibration(bool use);
  /// The profile predictions use; null when they use the default cost model.
  const CalibrationProfile* calibration_in_use() const;
  /// The recent files list, newest first.
  QStringList recent_files() const;

 signals:
  /// A serving run finished and its result is shown.
  void serving_finished();
  /// A latency-vs-QPS run finished and its curve is shown.
  void qps_finished();
  /// A search finished and its result is shown.
  void search_finished();
  /// The search in flight costed `done` of the `total` layouts it enumerated (polled).
  void search_progressed(qint64 done, qint64 total);
  /// The latency-vs-QPS run in flight has run `done` of about `total` probes (polled).
  void qps_progressed(qint64 done, qint64 total);
  /// A timeline run finished and its result is shown.
  void timeline_finished();
  /// A validation run finished and its result is shown.
  void validation_finished();

 protected:
  /// Saves geometry and state.
  void closeEvent(QCloseEvent* event) override;

 private:
  void build_menus();
  void rebuild_recent_menu();
  void remember_file(const QString& path);
  void evaluate_training_now();
  std::optional<Scenario> validate_serving();
  void on_document_changed(ScenarioKind kind);
  void on_kind_changed(ScenarioKind kind);
  void update_title();
  void refresh_compare();
  void open_dialog();
  void save();
  void save_as();
  void export_dialog();
  void export_csv_dialog();
  void export_chart_dialog(bool svg);
  void open_calibration_dialog();
  void open_serving_result_dialog();
  void open_hf_config_dialog();
  void on_calibration_toggled();

  ScenarioPanel* panel_ = nullptr;
  TrainingView* training_view_ = nullptr;
  ServingView* serving_view_ = nullptr;
  CompareView* compare_view_ = nullptr;
  CalibrationView* calibration_view_ = nullptr;
  ServingStepsView* serving_steps_view_ = nullptr;
  SearchView* search_view_ = nullptr;
  TimelineView* timeline_view_ = nullptr;
  ValidationView* validation_view_ = nullptr;
  QStackedWidget* results_ = nullptr;
  QTabWidget* views_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  QTimer* serving_timer_ = nullptr;
  QTimer* search_poll_ = nullptr;  ///< reads the search's progress counter while it runs
  std::shared_ptr<ProgressCounter> search_progress_;
  QTimer* qps_poll_ = nullptr;  ///< reads the latency-vs-QPS run's probe counter while it runs
  std::shared_ptr<ProgressCounter> qps_progress_;
  QLabel* calibration_label_ = nullptr;
  /// The calibration profile last read; null while none is.
  std::shared_ptr<const CalibrationProfile> calibration_;
  std::filesystem::path base_dir_;
  std::vector<std::filesystem::path> validation_files_;  ///< the files of the last validation run
  QString training_path_, serving_path_;
  std::string training_report_, serving_report_;
  /// The pinned report; empty while none is pinned.
  std::string pinned_report_;
  ScenarioKind pinned_kind_ = ScenarioKind::training;
  /// Bumped by every serving edit, run and cancel; a finished run shows only if its
  /// generation is still current.
  uint64_t generation_ = 0;
  bool serving_dirty_ = true;
  uint64_t qps_generation_ = 0;
  /// The flags the serving and latency-vs-QPS runs in flight read; set to stop them.
  std::shared_ptr<std::atomic<bool>> serving_stop_, qps_stop_, search_stop_;
  /// Set the flag of the run in flight (if any) and give the next run a fresh one.
  static std::shared_ptr<std::atomic<bool>> restart_flag(std::shared_ptr<std::atomic<bool>>& flag);
  uint64_t validation_generation_ = 0, search_generation_ = 0, timeline_generation_ = 0;
  /// The shown timeline's trace; empty while there is none.
  std::string timeline_trace_;
  bool timeline_dirty_ = true;
};

}  // namespace capsim::gui
