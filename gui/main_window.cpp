#include "main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QBuffer>
#include <QChart>
#include <QChartView>
#include <QCloseEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QGraphicsView>
#include <QImage>
#include <QInputDialog>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QPainter>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QSvgGenerator>
#include <QTabWidget>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <exception>
#include <thread>
#include <nlohmann/json.hpp>

#include "capsim/io/calibration_io.hpp"
#include "capsim/io/serving_steps.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"
#include "calibration_view.hpp"
#include "serving_steps_view.hpp"
#include "compare_view.hpp"
#include "evaluation.hpp"
#include "report_table.hpp"
#include "search_view.hpp"
#include "serving_view.hpp"
#include "timeline_view.hpp"
#include "training_view.hpp"
#include "validation_view.hpp"

namespace capsim::gui {

namespace {

constexpr int kMaxRecent = 8;
const char* const kRecentKey = "recent_files";

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  panel_ = new ScenarioPanel;
  auto* scroll = new QScrollArea;
  scroll->setWidget(panel_);
  scroll->setWidgetResizable(true);
  scroll->setMinimumWidth(panel_->sizeHint().width() + 24);
  training_view_ = new TrainingView;
  serving_view_ = new ServingView;
  results_ = new QStackedWidget;
  results_->addWidget(training_view_);
  results_->addWidget(serving_view_);
  search_view_ = new SearchView;
  validation_view_ = new ValidationView;
  views_ = new QTabWidget;
  views_->addTab(results_, tr("Results"));
  compare_view_ = new CompareView;
  views_->addTab(compare_view_, tr("Compare"));
  views_->addTab(search_view_, tr("Layout search"));
  timeline_view_ = new TimelineView;
  views_->addTab(timeline_view_, tr("Pipeline timeline"));
  views_->addTab(validation_view_, tr("Validation"));
  calibration_view_ = new CalibrationView;
  views_->addTab(calibration_view_, tr("Calibration"));
  serving_steps_view_ = new ServingStepsView;
  views_->addTab(serving_steps_view_, tr("Serving steps"));
  auto* split = new QSplitter;
  split->addWidget(scroll);
  split->addWidget(views_);
  split->setStretchFactor(1, 1);
  setCentralWidget(split);

  serving_timer_ = new QTimer(this);
  serving_timer_->setSingleShot(true);
  serving_timer_->setInterval(300);
  connect(serving_timer_, &QTimer::timeout, this, &MainWindow::run_serving_now);
  qps_poll_ = new QTimer(this);
  qps_poll_->setInterval(100);
  connect(qps_poll_, &QTimer::timeout, this, [this] {
    if (!qps_progress_) return;
    const qint64 done = qps_progress_->done.load(), total = qps_progress_->total.load();
    serving_view_->show_qps_progress(done, total);
    emit qps_progressed(done, total);
  });
  search_poll_ = new QTimer(this);
  search_poll_->setInterval(100);
  connect(search_poll_, &QTimer::timeout, this, [this] {
    if (!search_progress_) return;
    const qint64 done = search_progress_->done.load(), total = search_progress_->total.load();
    search_view_->show_progress(done, total);
    emit search_progressed(done, total);
  });
  connect(panel_, &ScenarioPanel::document_changed, this, &MainWindow::on_document_changed);
  connect(panel_, &ScenarioPanel::kind_changed, this, &MainWindow::on_kind_changed);
  connect(panel_, &ScenarioPanel::hf_config_requested, this, &MainWindow::open_hf_config_dialog);
  connect(panel_, &ScenarioPanel::trace_file_requested, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open request trace"), QString(),
                                                      tr("Request trace (*.csv *.jsonl *.json)"));
    if (!path.isEmpty()) panel_->set_trace_file(path);
  });
  connect(serving_view_, &ServingView::run_requested, this, &MainWindow::run_serving_now);
  connect(serving_view_, &ServingView::cancel_requested, this, &MainWindow::cancel_serving);
  connect(serving_view_, &ServingView::qps_requested, this, &MainWindow::run_qps_now);
  connect(serving_view_, &ServingView::qps_cancel_requested, this, &MainWindow::cancel_qps);
  connect(search_view_, &SearchView::run_requested, this, &MainWindow::run_search_now);
  connect(search_view_, &SearchView::cancel_requested, this, &MainWindow::cancel_search);
  connect(search_view_, &SearchView::layout_chosen, this, &MainWindow::use_layout);
  connect(timeline_view_, &TimelineView::run_requested, this, &MainWindow::run_timeline_now);
  connect(timeline_view_, &TimelineView::export_requested, this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Export trace"), QString(), tr("Chrome trace (*.json)"));
    if (!path.isEmpty()) export_trace(path);
  });
  connect(views_, &QTabWidget::currentChanged, this, [this] {
    if (views_->currentWidget() == timeline_view_ && timeline_dirty_) run_timeline_now();
  });
  connect(calibration_view_, &CalibrationView::open_requested, this, &MainWindow::open_calibration_dialog);
  connect(calibration_view_, &CalibrationView::use_toggled, this, &MainWindow::on_calibration_toggled);
  connect(serving_steps_view_, &ServingStepsView::open_requested, this, &MainWindow::open_serving_result_dialog);
  connect(serving_steps_view_, &ServingStepsView::apply_requested, this, &MainWindow::apply_step_overhead);
  connect(compare_view_, &CompareView::pin_requested, this, &MainWindow::pin_report);
  connect(compare_view_, &CompareView::unpin_requested, this, &MainWindow::unpin_report);
  connect(validation_view_, &ValidationView::run_requested, this, [this] { run_validation_now(); });
  connect(validation_view_, &ValidationView::files_chosen, this, &MainWindow::run_validation_now);
  connect(validation_view_, &ValidationView::case_chosen, this, &MainWindow::load_validation_case);

  calibration_label_ = new QLabel;
  calibration_label_->setObjectName(QStringLiteral("calibration_in_use"));
  statusBar()->addPermanentWidget(calibration_label_);
  build_menus();
  QSettings settings;
  if (!restoreGeometry(settings.value("geometry").toByteArray())) resize(1280, 860);
  restoreState(settings.value("window_state").toByteArray());
  update_title();
  evaluate_training_now();
}

MainWindow::~MainWindow() = default;

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open scenario..."), this, &MainWindow::open_dialog);
  open->setShortcut(QKeySequence::Open);
  recent_menu_ = file->addMenu(tr("Open &recent"));
  QAction* save = file->addAction(tr("&Save scenario"), this, &MainWindow::save);
  save->setShortcut(QKeySequence::Save);
  QAction* save_as = file->addAction(tr("Save scenario &as..."), this, &MainWindow::save_as);
  save_as->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
  QAction* exp = file->addAction(tr("&Export report JSON..."), this, &MainWindow::export_dialog);
  exp->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  QAction* csv = file->addAction(tr("Export report &CSV..."), this, &MainWindow::export_csv_dialog);
  csv->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E));
  QAction* png = file->addAction(tr("Export chart as &PNG..."), this, [this] { export_chart_dialog(false); });
  png->setShortcut(QKeySequence(Qt::CTRL | Qt::ALT | Qt::Key_P));
  QAction* svg = file->addAction(tr("Export chart as S&VG..."), this, [this] { export_chart_dialog(true); });
  svg->setShortcut(QKeySequence(Qt::CTRL | Qt::ALT | Qt::Key_S));
  file->addSeparator();
  file->addAction(tr("Open &HF config as the model..."), this, &MainWindow::open_hf_config_dialog);
  QAction* cal = file->addAction(tr("Open calibration &profile..."), this, &MainWindow::open_calibration_dialog);
  cal->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  file->addAction(tr("Open serving &benchmark result..."), this, &MainWindow::open_serving_result_dialog);
  QAction* pin = file->addAction(tr("&Pin report"), this, &MainWindow::pin_report);
  pin->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);
  rebuild_recent_menu();
}

QStringList MainWindow::recent_files() const {
  return QSettings().value(kRecentKey).toStringList();
}

void MainWindow::rebuild_recent_menu() {
  recent_menu_->clear();
  const QStringList files = recent_files();
  for (const QString& f : files) recent_menu_->addAction(f, this, [this, f] { open_file(f); });
  recent_menu_->setEnabled(!files.isEmpty());
}

void MainWindow::remember_file(const QString& path) {
  const QString abs = QFileInfo(path).absoluteFilePath();
  QStringList files = recent_files();
  files.removeAll(abs);
  files.prepend(abs);
  while (files.size() > kMaxRecent) files.removeLast();
  QSettings().setValue(kRecentKey, files);
  rebuild_recent_menu();
}

void MainWindow::update_title() {
  const QString& path = panel_->kind() == ScenarioKind::training ? training_path_ : serving_path_;
  setWindowTitle(path.isEmpty() ? tr("capsim - what if") : tr("capsim - %1").arg(QFileInfo(path).fileName()));
}

void MainWindow::evaluate_training_now() {
  // The timeline shows the step of the document it ran; an edit makes it stale.
  ++timeline_generation_;
  timeline_trace_.clear();
  timeline_dirty_ = true;
  if (views_->currentWidget() == timeline_view_)
    run_timeline_now();
  else
    timeline_view_->show_idle(tr("Run the training scenario's step on the discrete-event engine."));
  const TrainingOutcome out =
      evaluate_training_document(panel_->document(ScenarioKind::training), base_dir_, calibration_in_use());
  training_report_ = out.report;
  training_view_->show_outcome(out);
  // What auto fields became: the layout's values, and the system's NIC rate.
  nlohmann::json chosen;
  if (!out.report.empty()) {
    const nlohmann::json r = nlohmann::json::parse(out.report);
    chosen = r.value("layout", nlohmann::json::object());
    if (r.contains("system") && r["system"].contains("nic_gbps_per_gpu"))
      chosen["nic_gbps_per_gpu"] = r["system"]["nic_gbps_per_gpu"];
  }
  panel_->show_resolved(ScenarioKind::training, chosen);
  refresh_compare();
  if (panel_->kind() == ScenarioKind::training) {
    panel_->show_issues(out.issues);
    if (!out.internal_error.empty())
      panel_->show_message(tr("Internal error: %1").arg(QString::fromStdString(out.internal_error)));
  }
}

std::optional<Scenario> MainWindow::validate_serving() {
  try {
    Scenario s = read_serving_document(panel_->document(ScenarioKind::inference), base_dir_);
    panel_->show_issues({});
    return s;
  } catch (const InputError& e) {
    panel_->show_issues(e.issues());
  } catch (const std::exception& e) {
    panel_->show_message(tr("Internal error: %1").arg(QString::fromUtf8(e.what())));
  }
  return std::nullopt;
}

std::shared_ptr<std::atomic<bool>> MainWindow::restart_flag(std::shared_ptr<std::atomic<bool>>& flag) {
  if (flag) flag->store(true);
  flag = std::make_shared<std::atomic<bool>>(false);
  return flag;
}

void MainWindow::run_serving_now() {
  serving_timer_->stop();
  ++generation_;
  const auto stop = restart_flag(serving_stop_);
  serving_report_.clear();
  serving_dirty_ = false;
  const std::optional<Scenario> s = validate_serving();
  if (!s) {
    serving_view_->show_idle(tr("No result: the input has problems (listed under the editor)."));
    return;
  }
  serving_view_->show_running();
  refresh_compare();
  const uint64_t gen = generation_;
  auto* watcher = new QFutureWatcher<ServingOutcome>(this);
  connect(watcher, &QFutureWatcher<ServingOutcome>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != generation_) return;  // an edit, a newer run or a cancel came since
    const ServingOutcome out = watcher->result();
    serving_report_ = out.report;
    serving_view_->show_outcome(out);
    nlohmann::json resolved;
    if (!out.report.empty()) {
      const nlohmann::json r = nlohmann::json::parse(out.report);
      resolved = r.value("resolved", nlohmann::json::object());
      if (r.contains("engine") && r["engine"].contains("preemption"))
        resolved["preemption"] = r["engine"]["preemption"];
    }
    panel_->show_resolved(ScenarioKind::inference, resolved);
    refresh_compare();
    emit serving_finished();
  });
  watcher->setFuture(QtConcurrent::run([scenario = *s, cal = calibration_in_use() ? calibration_ : nullptr, stop] {
    return run_serving(scenario, kDefaultSeed, cal.get(), stop.get());
  }));
}

void MainWindow::cancel_serving() {
  serving_timer_->stop();
  ++generation_;
  if (serving_stop_) serving_stop_->store(true);
  serving_report_.clear();
  serving_dirty_ = true;
  serving_view_->show_idle(tr("Cancelled; press Run to simulate again."));
  refresh_compare();
}

void MainWindow::run_qps_now() {
  const uint64_t gen = ++qps_generation_;
  const auto stop = restart_flag(qps_stop_);
  const std::optional<Scenario> s = validate_serving();
  if (!s) {
    serving_view_->show_qps_idle(tr("No result: the input has problems (listed under the editor)."));
    return;
  }
  serving_view_->show_qps_running();
  auto* watcher = new QFutureWatcher<QpsCurve>(this);
  connect(watcher, &QFutureWatcher<QpsCurve>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != qps_generation_) return;  // an edit or a newer run came since
    qps_poll_->stop();
    qps_progress_.reset();
    serving_view_->show_qps(watcher->result());
    emit qps_finished();
  });
  qps_progress_ = std::make_shared<ProgressCounter>();
  qps_poll_->start();
  watcher->setFuture(QtConcurrent::run([scenario = *s, sla = serving_view_->sla(),
                                        cal = calibration_in_use() ? calibration_ : nullptr, stop,
                                        progress = qps_progress_] {
    return run_qps_curve(scenario, sla, kDefaultSeed, cal.get(), stop.get(), progress.get());
  }));
}

void MainWindow::cancel_qps() {
  ++qps_generation_;
  qps_poll_->stop();
  qps_progress_.reset();
  if (qps_stop_) qps_stop_->store(true);
  serving_view_->show_qps_idle(tr("Latency vs QPS cancelled; press Latency vs QPS (F6) to run it again."));
}

void MainWindow::run_search_now() {
  const uint64_t gen = ++search_generation_;
  const auto stop = restart_flag(search_stop_);
  const TrainingOutcome check = evaluate_training_document(panel_->document(ScenarioKind::training), base_dir_);
  if (!check.issues.empty()) {
    search_view_->show_idle(tr("No result: the training input has problems (listed under the editor)."));
    return;
  }
  search_view_->show_running();
  auto* watcher = new QFutureWatcher<SearchOutcome>(this);
  connect(watcher, &QFutureWatcher<SearchOutcome>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != search_generation_) return;  // cancelled, or a newer search came since
    search_poll_->stop();
    search_progress_.reset();
    search_view_->show_outcome(watcher->result());
    emit search_finished();
  });
  SearchOptions opt = search_options(search_view_->gpu_counts(), search_view_->top());
  opt.cancel = stop.get();
  search_progress_ = std::make_shared<ProgressCounter>();
  opt.progress = search_progress_.get();
  search_poll_->start();
  watcher->setFuture(QtConcurrent::run([doc = panel_->document(ScenarioKind::training), base = base_dir_, opt, stop,
                                        progress = search_progress_,
                                        cal = calibration_in_use() ? calibration_ : nullptr] {
    return run_layout_search(doc, base, opt, cal.get());
  }));
}

void MainWindow::cancel_search() {
  ++search_generation_;
  search_poll_->stop();
  search_progress_.reset();
  if (search_stop_) search_stop_->store(true);
  search_view_->show_idle(tr("Cancelled; press Search to run again."));
}

void MainWindow::use_layout(const SearchCandidate& c) {
  panel_->load_document(apply_candidate(panel_->document(ScenarioKind::training), c));
  panel_->set_kind(ScenarioKind::training);
  views_->setCurrentWidget(results_);
  statusBar()->showMessage(tr("Layout from the search: %1 GPUs, tp %2, pp %3, dp %4")
                               .arg(c.num_gpus)
                               .arg(c.plan.tp)
                               .arg(c.plan.pp)
                               .arg(c.plan.dp),
                           5000);
}

void MainWindow::run_timeline_now() {
  const uint64_t gen = ++timeline_generation_;
  timeline_trace_.clear();
  timeline_dirty_ = false;
  timeline_view_->show_running();
  auto* watcher = new QFutureWatcher<TimelineOutcome>(this);
  connect(watcher, &QFutureWatcher<TimelineOutcome>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != timeline_generation_) return;  // the scenario changed or a newer run came since
    const TimelineOutcome out = watcher->result();
    timeline_trace_ = out.trace;
    timeline_view_->show_outcome(out);
    emit timeline_finished();
  });
  watcher->setFuture(QtConcurrent::run([doc = panel_->document(ScenarioKind::training), base = base_dir_,
                                        cal = calibration_in_use() ? calibration_ : nullptr] {
    return run_timeline(doc, base, cal.get());
  }));
}

bool MainWindow::export_trace(const QString& path) {
  if (timeline_trace_.empty()) {
    statusBar()->showMessage(tr("No timeline to export: run the step first."), 8000);
    return false;
  }
  try {
    io::write_file_atomic(path.toStdString(), timeline_trace_);
  } catch (const std::exception& e) {
    statusBar()->showMessage(tr("Could not write %1: %2").arg(path, QString::fromUtf8(e.what())), 8000);
    return false;
  }
  statusBar()->showMessage(tr("Trace written to %1 (open it in ui.perfetto.dev)").arg(path), 5000);
  return true;
}

void MainWindow::run_validation_now(const QStringList& files) {
  std::vector<std::filesystem::path> paths;
  for (const QString& f : files) paths.emplace_back(f.toStdString());
  if (paths.empty()) paths = default_validation_files();
  QStringList names;
  for (const auto& p : paths) names << QString::fromStdString(p.string());
  validation_files_ = paths;
  const uint64_t gen = ++validation_generation_;
  validation_view_->show_running(names);
  auto* watcher = new QFutureWatcher<ValidationOutcome>(this);
  connect(watcher, &QFutureWatcher<ValidationOutcome>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != validation_generation_) return;  // a newer run came since
    validation_view_->show_outcome(watcher->result());
    emit validation_finished();
  });
  watcher->setFuture(QtConcurrent::run([paths] {
    return run_validation_files(paths, std::max(1u, std::thread::hardware_concurrency()));
  }));
}

bool MainWindow::load_validation_case(const QString& file, const QString& id) {
  for (const auto& path : validation_files_) {
    if (QString::fromStdString(path.filename().string()) != file) continue;
    try {
      const nlohmann::json doc = io::read_json_file(path);
      if (!doc.is_object() || !doc.contains("cases") || !doc["cases"].is_array()) continue;
      for (const nlohmann::json& c : doc["cases"]) {
        if (!c.is_object() || c.value("id", std::string()) != id.toStdString()) continue;
        // A case is a scenario with its measurements beside it: the editor takes it as is
        // (relative paths from its file's folder), as `capsim train/infer` reads it.
        base_dir_ = path.parent_path();
        (c.value("kind", std::string()) == "inference" ? serving_path_ : training_path_).clear();
        panel_->load_document(c);
        views_->setCurrentWidget(results_);
        update_title();
        statusBar()->showMessage(tr("Case %1 of %2 loaded").arg(id, file), 5000);
        return true;
      }
    } catch (const std::exception& e) {
      statusBar()->showMessage(tr("Could not read %1: %2").arg(file, QString::fromUtf8(e.what())), 8000);
      return false;
    }
  }
  statusBar()->showMessage(tr("Case %1 not found in %2").arg(id, file), 8000);
  return false;
}

void MainWindow::on_document_changed(ScenarioKind kind) {
  if (kind == ScenarioKind::training) {
    evaluate_training_now();
    return;
  }
  // Results of the old document are stale from now on: their runs stop.
  ++generation_;
  ++qps_generation_;
  qps_poll_->stop();
  qps_progress_.reset();
  if (serving_stop_) serving_stop_->store(true);
  if (qps_stop_) qps_stop_->store(true);
  serving_view_->show_qps_idle(tr("The scenario changed: press Latency vs QPS (F6) to run it again."));
  serving_report_.clear();
  serving_dirty_ = true;
  panel_->show_resolved(ScenarioKind::inference, nlohmann::json());
  if (panel_->kind() == ScenarioKind::inference) {
    if (validate_serving()) {
      serving_view_->show_running();
      serving_timer_->start();
    } else {
      serving_view_->show_idle(tr("No result: the input has problems (listed under the editor)."));
    }
  } else {
    // A model or system edit behind the Serving tab: nothing of the old document stays
    // drawn; the new one runs when the Serving tab comes to the front.
    serving_timer_->stop();
    serving_view_->show_idle(tr("The scenario changed: it runs when the Serving tab is in front."));
  }
  refresh_compare();
}

void MainWindow::on_kind_changed(ScenarioKind kind) {
  results_->setCurrentIndex(kind == ScenarioKind::training ? 0 : 1);
  update_title();
  refresh_compare();
  if (kind == ScenarioKind::training) {
    evaluate_training_now();
  } else if (serving_dirty_) {
    run_serving_now();
  } else if (!serving_view_->running()) {
    validate_serving();
  }
}

bool MainWindow::open_file(const QString& path) {
  try {
    const nlohmann::json doc = io::read_json_file(path.toStdString());
    if (!doc.is_object()) throw InputError({{"", io::brief(doc), "a scenario must be a JSON object", {}}});
    base_dir_ = std::filesystem::path(path.toStdString()).parent_path();
    const bool inference = doc.value("kind", std::string()) == "inference" ||
                           (!doc.contains("kind") && doc.contains("inference") && !doc.contains("training"));
    (inference ? serving_path_ : training_path_) = path;
    serving_dirty_ = true;
    ++generation_;
    serving_report_.clear();
    panel_->load_document(doc);  // both documents changed: both kinds' results follow
    remember_file(path);
    update_title();
    statusBar()->showMessage(tr("Opened %1").arg(path), 5000);
    return true;
  } catch (const InputError& e) {
    panel_->show_issues(e.issues());
  } catch (const std::exception& e) {
    panel_->show_message(QString::fromUtf8(e.what()));
  }
  statusBar()->showMessage(tr("Could not open %1").arg(path), 5000);
  return false;
}

bool MainWindow::save_file(const QString& path) {
  try {
    io::write_file_atomic(path.toStdString(), io::dump(panel_->document(panel_->kind())));
  } catch (const std::exception& e) {
    statusBar()->showMessage(tr("Could not save %1: %2").arg(path, QString::fromUtf8(e.what())), 8000);
    return false;
  }
  (panel_->kind() == ScenarioKind::training ? training_path_ : serving_path_) = path;
  remember_file(path);
  update_title();
  statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
  return true;
}

QString MainWindow::current_report() const {
  return QString::fromStdString(panel_->kind() == ScenarioKind::training ? training_report_ : serving_report_);
}

bool MainWindow::export_report(const QString& path) {
  const std::string& report = panel_->kind() == ScenarioKind::training ? training_report_ : serving_report_;
  if (report.empty()) {
    statusBar()->showMessage(tr("No report to export: fix the input or wait for the run."), 8000);
    return false;
  }
  try {
    io::write_file_atomic(path.toStdString(), report);
  } catch (const std::exception& e) {
    statusBar()->showMessage(tr("Could not write %1: %2").arg(path, QString::fromUtf8(e.what())), 8000);
    return false;
  }
  statusBar()->showMessage(tr("Report written to %1").arg(path), 5000);
  return true;
}

bool MainWindow::export_report_csv(const QString& path) {
  const std::string& report = panel_->kind() == ScenarioKind::training ? training_report_ : serving_report_;
  if (report.empty()) {
    statusBar()->showMessage(tr("No report to export: fix the input or wait for the run."), 8000);
    return false;
  }
  try {
    io::write_file_atomic(path.toStdString(), report_csv(nlohmann::json::parse(report)));
  } catch (const std::exception& e) {
    statusBar()->showMessage(tr("Could not write %1: %2").arg(path, QString::fromUtf8(e.what())), 8000);
    return false;
  }
  statusBar()->showMessage(tr("Report written to %1").arg(path), 5000);
  return true;
}

QList<QGraphicsView*> MainWindow::visible_charts() const {
  QList<QGraphicsView*> out;
  for (QGraphicsView* v : views_->currentWidget()->findChildren<QGraphicsView*>())
    if (v->isVisibleTo(this)) out << v;
  std::stable_sort(out.begin(), out.end(), [this](const QGraphicsView* a, const QGraphicsView* b) {
    return a->mapTo(this, QPoint()).y() < b->mapTo(this, QPoint()).y();
  });
  return out;
}

QString MainWindow::chart_name(const QGraphicsView* view) {
  if (const auto* cv = qobject_cast<const QChartView*>(view))
    if (!cv->chart()->title().isEmpty()) return cv->chart()->title();
  return view->objectName().isEmpty() ? tr("chart") : view->objectName();
}

bool MainWindow::export_chart(const QString& path, int index) {
  const QList<QGraphicsView*> charts = visible_charts();
  if (index < 0 || index >= charts.size()) {
    statusBar()->showMessage(tr("No chart to export on this tab."), 8000);
    return false;
  }
  QGraphicsView* view = charts[index];
  if (view->size().isEmpty()) {
    statusBar()->showMessage(tr("The chart has no size yet: show the window first."), 8000);
    return false;
  }
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (path.endsWith(QStringLiteral(".svg"), Qt::CaseInsensitive)) {
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(view->viewport()->size());
    svg.setViewBox(QRect(QPoint(), view->viewport()->size()));
    svg.setTitle(chart_name(view));
    QPainter painter(&svg);
    view->render(&painter);
  } else {
    const QImage image = view->grab().toImage();
    if (image.isNull() || !image.save(&buffer, "PNG")) {
      statusBar()->showMessage(tr("Could not render the chart."), 8000);
      return false;
    }
  }
  buffer.close();
  try {
    io::write_file_atomic(path.toStdString(), std::string_view(bytes.constData(), static_cast<size_t>(bytes.size())));
  } catch (const std::exception& e) {
    statusBar()->showMessage(tr("Could not write %1: %2").arg(path, QString::fromUtf8(e.what())), 8000);
    return false;
  }
  statusBar()->showMessage(tr("Chart written to %1").arg(path), 5000);
  return true;
}

bool MainWindow::pin_report() {
  const ScenarioKind kind = panel_->kind();
  const std::string& report = kind == ScenarioKind::training ? training_report_ : serving_report_;
  if (report.empty()) {
    statusBar()->showMessage(kind == ScenarioKind::training
                                 ? tr("No training report to pin: fix the input first.")
                                 : tr("No serving report to pin: fix the input or wait for the run."),
                             8000);
    return false;
  }
  pinned_report_ = report;
  pinned_kind_ = kind;
  refresh_compare();
  statusBar()->showMessage(kind == ScenarioKind::training
                               ? tr("Training report pinned; edits now compare against it (Compare tab).")
                               : tr("Serving report pinned; edits now compare against it (Compare tab)."),
                           5000);
  return true;
}

void MainWindow::unpin_report() {
  pinned_report_.clear();
  refresh_compare();
}

void MainWindow::refresh_compare() {
  if (pinned_report_.empty()) {
    compare_view_->show_reports({}, {});
    return;
  }
  const bool serving = pinned_kind_ == ScenarioKind::inference;
  const std::string& current = serving ? serving_report_ : training_report_;
  const QString kind = serving ? tr("serving") : tr("training");
  QString note;
  if (current.empty())
    note = serving ? (serving_view_->running() ? tr("The serving run is in flight.")
                                               : tr("Run the serving scenario (F5) or fix its input."))
                   : tr("The training input has problems.");
  if (panel_->kind() != pinned_kind_)
    note += (note.isEmpty() ? QString() : QStringLiteral(" ")) +
            tr("The editor shows the %1 scenario, a different kind: the table compares the pinned %2 report with "
               "the current %2 scenario.")
                .arg(serving ? tr("training") : tr("serving"), kind);
  compare_view_->show_reports(pinned_report_, current, kind, note);
}

bool MainWindow::open_calibration(const QString& path) {
  // The default curves are for the training scenario's system; its preset's when the
  // scenario does not read.
  SystemSpec sys;
  try {
    sys = io::scenario_from_json(panel_->document(ScenarioKind::training), base_dir_).system;
  } catch (const std::exception&) {
    sys.gpu = io::load_gpu(io::gpu_preset_ids().front());
  }
  const CalibrationOutcome out = load_calibration(path.toStdString(), sys);
  const bool was_used = calibration_in_use() != nullptr;
  calibration_ = out.profile;
  calibration_view_->show_outcome(path, out);  // a profile that did not read clears "use"
  // The profile in use changed (or went): every result follows.
  if (was_used && calibration_view_->use_for_predictions()) on_calibration_toggled();
  views_->setCurrentWidget(calibration_view_);
  const QString name = QFileInfo(path).fileName();
  statusBar()->showMessage(out.ok() ? tr("Profile %1 loaded").arg(name) : tr("Could not read %1").arg(name), 5000);
  return out.ok();
}

const CalibrationProfile* MainWindow::calibration_in_use() const {
  return calibration_ && calibration_view_->use_for_predictions() ? calibration_.get() : nullptr;
}

void MainWindow::set_use_calibration(bool use) {
  calibration_view_->set_use_for_predictions(use);
}

void MainWindow::on_calibration_toggled() {
  const CalibrationProfile* cal = calibration_in_use();
  calibration_label_->setText(cal ? tr("calibrated: %1").arg(QString::fromStdString(cal->name)) : QString());
  if (cal) {
    try {
      const GpuSpec gpu = io::scenario_from_json(panel_->document(panel_->kind()), base_dir_).system.gpu;
      if (!io::profile_matches(*cal, gpu))
        statusBar()->showMessage(tr("Profile %1 was measured on %2, not %3: the default model answers")
                                     .arg(QString::fromStdString(cal->name), QString::fromStdString(cal->gpu),
                                          QString::fromStdString(gpu.id)),
                                 8000);
    } catch (const std::exception&) {
      // The input has problems: the editor lists them.
    }
  }
  // Every result of the old cost model is stale: the serving results as after an edit.
  on_document_changed(ScenarioKind::inference);
  ++search_generation_;
  if (search_stop_) search_stop_->store(true);
  search_view_->show_idle(tr("The cost model changed: press Search to run again."));
  evaluate_training_now();
}

void MainWindow::open_dialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open scenario"), QString(), tr("Scenario (*.json)"));
  if (!path.isEmpty()) open_file(path);
}

void MainWindow::save() {
  const QString& path = panel_->kind() == ScenarioKind::training ? training_path_ : serving_path_;
  if (path.isEmpty())
    save_as();
  else
    save_file(path);
}

void MainWindow::save_as() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save scenario"), QString(), tr("Scenario (*.json)"));
  if (!path.isEmpty()) save_file(path);
}

void MainWindow::export_dialog() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export report"), QString(), tr("Report (*.json)"));
  if (!path.isEmpty()) export_report(path);
}

void MainWindow::export_csv_dialog() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export report as CSV"), QString(), tr("CSV (*.csv)"));
  if (!path.isEmpty()) export_report_csv(path);
}

void MainWindow::export_chart_dialog(bool svg) {
  const QList<QGraphicsView*> charts = visible_charts();
  if (charts.isEmpty()) {
    statusBar()->showMessage(tr("No chart to export on this tab."), 8000);
    return;
  }
  int index = 0;
  if (charts.size() > 1) {
    QStringList names;
    for (const QGraphicsView* v : charts) names << chart_name(v);
    bool ok = false;
    const QString name = QInputDialog::getItem(this, tr("Export chart"), tr("Chart:"), names, 0, false, &ok);
    if (!ok) return;
    index = static_cast<int>(names.indexOf(name));
  }
  const QString path = QFileDialog::getSaveFileName(this, svg ? tr("Export chart as SVG") : tr("Export chart as PNG"),
                                                    QString(), svg ? tr("SVG (*.svg)") : tr("PNG image (*.png)"));
  if (!path.isEmpty()) export_chart(path, index);
}

void MainWindow::open_hf_config_dialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open Hugging Face config"), QString(),
                                                    tr("Model config (config.json *.json)"));
  if (path.isEmpty()) return;
  if (!panel_->open_hf_config(path))
    statusBar()->showMessage(tr("The config does not read: see the problems under the editor."), 8000);
}

bool MainWindow::open_serving_result(const QString& path) {
  io::BenchmarkRequests bench;
  try {
    bench = io::read_benchmark_requests(path.toStdString());
  } catch (const InputError& e) {
    QString text;
    for (const auto& line : issue_lines(e.issues())) text += (text.isEmpty() ? QString() : QStringLiteral("\n")) + QString::fromStdString(line);
    serving_steps_view_->show_report(path, nullptr, text);
    views_->setCurrentWidget(serving_steps_view_);
    statusBar()->showMessage(tr("Could not read %1").arg(QFileInfo(path).fileName()), 5000);
    return false;
  }
  // The serving scenario prices the steps where it reads; the steps alone otherwise.
  std::optional<Scenario> s;
  try {
    s = read_serving_document(panel_->document(ScenarioKind::inference), base_dir_);
  } catch (const InputError&) {
  }
  std::optional<io::CostModels> costs;
  if (s) costs.emplace(s->system, calibration_in_use());
  nlohmann::json r = io::analyze_serving_steps(bench, 8, s ? &*s : nullptr, costs ? &costs->get() : nullptr);
  if (!s) r["notes"].push_back("the serving scenario does not read: the steps are shown without the model's");
  serving_steps_view_->show_report(path, r);
  views_->setCurrentWidget(serving_steps_view_);
  statusBar()->showMessage(tr("%1: %2 steps recovered").arg(QFileInfo(path).fileName()).arg(r.value("steps", 0)), 5000);
  return true;
}

void MainWindow::apply_step_overhead(double host_ms, double eager_us_per_layer) {
  nlohmann::json doc = panel_->document(ScenarioKind::inference);
  // As the lines that offer them show: two decimals of a millisecond, whole microseconds.
  doc["inference"]["engine"]["step_overhead_ms"] = std::round(host_ms * 100.0) / 100.0;
  if (eager_us_per_layer >= 0) doc["inference"]["engine"]["eager_host_us_per_layer"] = std::round(eager_us_per_layer);
  panel_->load_document(doc);
}

void MainWindow::open_serving_result_dialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open serving benchmark result"), QString(),
                                                    tr("Benchmark result (*.json *.jsonl)"));
  if (!path.isEmpty()) open_serving_result(path);
}

void MainWindow::open_calibration_dialog() {
  const QString path =
      QFileDialog::getOpenFileName(this, tr("Open calibration profile"), QString(), tr("Calibration profile (*.json)"));
  if (!path.isEmpty()) open_calibration(path);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue("geometry", saveGeometry());
  settings.setValue("window_state", saveState());
  cancel_serving();
  cancel_qps();
  ++search_generation_;
  if (search_stop_) search_stop_->store(true);
  ++validation_generation_;
  ++timeline_generation_;
  QMainWindow::closeEvent(event);
}

}  // namespace capsim::gui
