// capsim-gui against the libraries it shows: the charts carry the report's numbers, the
// reports are the CLI's bytes, bad input shows its problems and no stale result.

#include <QChartView>
#include <QCheckBox>
#include <QLegend>
#include <QLegendMarker>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDir>
#include <QElapsedTimer>
#include <QGraphicsView>
#include <QImage>
#include <QAction>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStyle>
#include <QStyleOptionComboBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QThreadPool>
#include <QTreeWidget>
#include <QWheelEvent>
#include <QtTest>
#include <algorithm>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "capsim/core/units.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/core/model.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"
#include "capsim/io/serving_steps.hpp"
#include "capsim/io/trace.hpp"
#include "capsim/io/validation.hpp"
#include "bench_repaint.hpp"
#include "calibration_view.hpp"
#include "compare_view.hpp"
#include "evaluation.hpp"
#include "main_window.hpp"
#include "report_table.hpp"
#include "search_view.hpp"
#include "serving_steps_view.hpp"
#include "serving_view.hpp"
#include "timeline_view.hpp"
#include "training_view.hpp"
#include "validation_view.hpp"

using namespace capsim;
using nlohmann::json;

namespace {

/// What `capsim train --format json` prints for `doc`.
json cli_train_report(const json& doc, const std::filesystem::path& base = {}) {
  const Scenario s = io::scenario_from_json(doc, base);
  const io::CostModels costs(s.system, nullptr);
  return io::analytical_train_report(s, evaluate_training(s, &costs.get()));
}

/// The capsim command's exit code, standard output and standard error.
struct CliRun {
  int code = -1;
  QString out, err;
};

CliRun run_cli(const QStringList& args) {
  QProcess p;
  p.start(QStringLiteral(CAPSIM_CLI), args);
  if (!p.waitForFinished(120000)) qFatal("capsim did not finish");
  return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

template <class W>
W* field(gui::MainWindow& w, const char* pointer) {
  W* widget = w.panel()->findChild<W*>(QString::fromUtf8(pointer));
  if (!widget) qFatal("no widget for %s", pointer);
  return widget;
}

/// What the serving chart over time should draw for `timeline`, worked out here from its
/// definition: replica 0's iterations by start; with more than `max_points`, consecutive
/// buckets of n / max_points iterations, each at its first start with its largest values.
std::pair<std::vector<QPointF>, std::vector<QPointF>> expected_over_time(const std::vector<IterationRecord>& timeline,
                                                                          size_t max_points) {
  std::vector<IterationRecord> mine;
  std::copy_if(timeline.begin(), timeline.end(), std::back_inserter(mine),
               [](const IterationRecord& it) { return it.replica == 0; });
  std::stable_sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  std::vector<QPointF> kv, batch;
  const size_t n = mine.size(), buckets = std::min(n, max_points);
  for (size_t b = 0; b < buckets; ++b) {
    const auto first = mine.begin() + static_cast<std::ptrdiff_t>(b * n / buckets);
    const auto last = mine.begin() + static_cast<std::ptrdiff_t>((b + 1) * n / buckets);
    const auto kv_max = std::max_element(first, last, [](const auto& a, const auto& c) {
      return a.kv_utilization < c.kv_utilization;
    });
    const auto batch_max = std::max_element(first, last, [](const auto& a, const auto& c) { return a.decodes < c.decodes; });
    kv.emplace_back(first->start, kv_max->kv_utilization * 100.0);
    batch.emplace_back(first->start, static_cast<double>(batch_max->decodes));
  }
  return {kv, batch};
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir_.path());
    QCoreApplication::setOrganizationName(QStringLiteral("capsim-test"));
    QCoreApplication::setApplicationName(QStringLiteral("capsim-gui-test"));
  }

  void tp_change_sets_memory_chart_to_cli_report() {
    gui::MainWindow w;
    json expected_doc = w.panel()->document(gui::ScenarioKind::training);
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    io::apply_overrides(expected_doc, {"training.tp=2"});
    const json r = cli_train_report(expected_doc);
    QCOMPARE(w.current_report().toStdString(), io::dump(r));
    const json& stages = r["memory"]["stages"];
    for (const char* c : {"weights", "gradients", "optimizer", "activations", "other"}) {
      const std::vector<double> bars = w.training_view()->memory_values(QString::fromUtf8(c));
      QCOMPARE(bars.size(), stages.size());
      for (size_t i = 0; i < bars.size(); ++i)
        QCOMPARE(bars[i], stages[i][std::string(c) + "_bytes"].get<double>() / kGiB);
    }
    QCOMPARE(w.training_view()->capacity_line(), r["memory"]["per_gpu"]["capacity_bytes"].get<double>() / kGiB);
    QCOMPARE(r["layout"]["dp"].get<int64_t>(), int64_t{4});  // dp left to auto follows the GPUs
    QVERIFY(w.training_view()->verdict().startsWith(QStringLiteral("Fits")));
    const std::vector<double> step = w.training_view()->step_values();
    const json& bd = r["time"]["breakdown"];
    const std::vector<double> want = {
        bd["compute_s"].get<double>(),           bd["recompute_s"].get<double>(),
        bd["exposed_comm_s"]["tp"].get<double>(), bd["exposed_comm_s"]["cp"].get<double>(),
        bd["exposed_comm_s"]["ep"].get<double>(), bd["exposed_comm_s"]["pp"].get<double>(),
        bd["exposed_comm_s"]["dp"].get<double>(), bd["bubble_s"].get<double>(),
        bd["optimizer_s"].get<double>()};
    QCOMPARE(step, want);
    // The legend names the parts the step has, each once.
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QStringList named;
    for (QChartView* v : w.training_view()->findChildren<QChartView*>())
      if (v->chart()->title().startsWith(QStringLiteral("Where the step time goes")))
        for (QLegendMarker* m : v->chart()->legend()->markers())
          if (m->isVisible()) named << m->label();
    QCOMPARE(named.size(), static_cast<qsizetype>(std::count_if(want.begin(), want.end(), [](double v) { return v != 0; })));
    QVERIFY(named.contains(QStringLiteral("compute")));
  }

  /// The operators table is `capsim train --ops` of the same scenario: every row, the
  /// largest computation first, its share and rate as the report gives them.
  void operators_table_is_the_cli_ops_report() {
    gui::MainWindow w;
    json doc = w.panel()->document(gui::ScenarioKind::training);
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    io::apply_overrides(doc, {"training.tp=2"});
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("s.json"));
    io::write_file_atomic(path.toStdString(), io::dump(doc));
    const CliRun run = run_cli({QStringLiteral("train"), path, QStringLiteral("--ops"), QStringLiteral("--format"),
                                QStringLiteral("json")});
    QCOMPARE(run.code, 0);
    const json ops = json::parse(run.out.toStdString())["operators"]["rows"];
    const std::vector<QStringList> rows = w.training_view()->operator_rows();
    QCOMPARE(rows.size(), ops.size());
    double largest = 0;
    for (const json& o : ops)
      if (!o["communication"].get<bool>()) largest = std::max(largest, o["pass_s"].get<double>());
    QCOMPARE(rows.front()[3], QString::number(1e3 * largest, 'f', 2));
    for (const QStringList& row : rows) {
      const auto it = std::find_if(ops.begin(), ops.end(), [&](const json& o) {
        return QString::fromStdString(o["name"].get<std::string>()) == row[0] &&
               QString::fromStdString(o["block"].get<std::string>()) == row[1];
      });
      QVERIFY2(it != ops.end(), qPrintable(row.join(QStringLiteral(" "))));
      QCOMPARE(row[2], QString::number((*it)["count"].get<int64_t>()));
      QCOMPARE(row[3], QString::number(1e3 * (*it)["pass_s"].get<double>(), 'f', 2));
      if (it->contains("share")) QCOMPARE(row[4], QStringLiteral("%1 %").arg(100 * (*it)["share"].get<double>(), 0, 'f', 1));
      else QCOMPARE(row[4], QStringLiteral("comm, before overlap"));
    }
  }

  /// With a token budget (and a price) the step panel shows the report's days, GPU-hours,
  /// cost and energy; the fields write the keys `--set` writes.
  void token_budget_shows_days_cost_and_energy() {
    gui::MainWindow w;
    json expected_doc = w.panel()->document(gui::ScenarioKind::training);
    QVERIFY(!w.training_view()->summary().contains(QStringLiteral("GPU-hours")));
    field<QDoubleSpinBox>(w, "/training/train_tokens")->setValue(1e12);
    field<QDoubleSpinBox>(w, "/training/usd_per_gpu_hour")->setValue(2.5);
    field<QDoubleSpinBox>(w, "/training/pue")->setValue(1.2);
    io::apply_overrides(expected_doc,
                        {"training.train_tokens=1e12", "training.usd_per_gpu_hour=2.5", "training.pue=1.2"});
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected_doc);
    const json r = cli_train_report(expected_doc);
    QCOMPARE(w.current_report().toStdString(), io::dump(r));
    const json& b = r["budget"];
    const QString summary = w.training_view()->summary();
    QVERIFY2(summary.contains(QStringLiteral("%1 days").arg(b["days"].get<double>(), 0, 'f', 1)), qPrintable(summary));
    QVERIFY(summary.contains(QStringLiteral("%1 GPU-hours").arg(b["gpu_hours"].get<double>(), 0, 'f', 0)));
    QVERIFY(summary.contains(QStringLiteral("$%1").arg(b["cost_usd"].get<double>(), 0, 'f', 0)));
    QVERIFY(summary.contains(QStringLiteral("%1 MWh").arg(b["energy_mwh"].get<double>(), 0, 'f', 1)));
    QVERIFY2(summary.contains(QStringLiteral("at %1% effective time")
                                  .arg(100.0 * b["effective_training_fraction"].get<double>(), 0, 'f', 1)),
             qPrintable(summary));
    // A stated share: the key --set writes, and the wall clock stretches by it.
    field<QDoubleSpinBox>(w, "/training/effective_training_fraction")->setValue(0.5);
    io::apply_overrides(expected_doc, {"training.effective_training_fraction=0.5"});
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected_doc);
    QCOMPARE(w.current_report().toStdString(), io::dump(cli_train_report(expected_doc)));
    QVERIFY(w.training_view()->summary().contains(QStringLiteral("at 50.0% effective time")));
    // Back to none: the keys leave the document and the line goes.
    field<QDoubleSpinBox>(w, "/training/train_tokens")->setValue(0);
    QVERIFY(!w.panel()->document(gui::ScenarioKind::training)["training"].contains("train_tokens"));
    QVERIFY(!w.training_view()->summary().contains(QStringLiteral("GPU-hours")));
  }

  /// The GPU menu's tooltip: the preset's datasheet figures, each with its source ids, and
  /// the sources' addresses from the preset file.
  void gpu_tooltip_lists_figures_and_sources() {
    gui::MainWindow w;
    auto* gpu = field<QComboBox>(w, "/system/gpu");
    for (int i = 0; i < gpu->count(); ++i) {
      const std::string id = gpu->itemData(i).toString().toStdString();
      const json raw = io::read_json_file(io::data_dir() / "gpus" / (id + ".json"));
      const QString tip = gpu->itemData(i, Qt::ToolTipRole).toString();
      const GpuSpec g = io::load_gpu(id);
      QVERIFY2(tip.contains(QStringLiteral("BF16 dense %1 TFLOP/s").arg(g.peak_bf16_tflops)), qPrintable(tip));
      QVERIFY(tip.contains(QStringLiteral("TDP %1 W").arg(g.tdp_w)));
      for (const json& s : raw["facts"]["peak_bf16_tflops"]["source"])
        QVERIFY2(tip.contains(QString::fromStdString(s.get<std::string>())), qPrintable(tip));
      for (const auto& [key, src] : raw["sources"].items()) {
        QVERIFY2(tip.contains(QStringLiteral("  %1: ").arg(QString::fromStdString(key))), qPrintable(tip));
        if (src.contains("url") && src["url"].is_string())
          QVERIFY2(tip.contains(QString::fromStdString(src["url"].get<std::string>())), qPrintable(tip));
      }
    }
    gpu->setCurrentIndex(gpu->count() - 1);
    QCOMPARE(gpu->toolTip(), gpu->itemData(gpu->count() - 1, Qt::ToolTipRole).toString());
  }

  void impossible_layout_shows_its_error_and_no_chart() {
    gui::MainWindow w;
    QVERIFY(!w.training_view()->memory_values(QStringLiteral("weights")).empty());
    field<QSpinBox>(w, "/training/tp")->setValue(3);
    std::vector<Issue> issues;
    try {
      io::scenario_from_json(w.panel()->document(gui::ScenarioKind::training));
    } catch (const InputError& e) {
      issues = e.issues();
    }
    QVERIFY(!issues.empty());
    for (const Issue& i : issues)
      QVERIFY2(w.panel()->issue_text().contains(QString::fromStdString(format_issue(i))),
               qPrintable(w.panel()->issue_text()));
    QVERIFY(w.training_view()->memory_values(QStringLiteral("weights")).empty());
    QVERIFY(w.training_view()->step_values().empty());
    QVERIFY(w.current_report().isEmpty());
    field<QSpinBox>(w, "/training/tp")->setValue(4);
    QVERIFY(w.panel()->issue_text().isEmpty());
    QVERIFY(!w.training_view()->memory_values(QStringLiteral("weights")).empty());
  }

  void does_not_fit_is_stated() {
    gui::MainWindow w;
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("llama3-70b"));
    field<QComboBox>(w, "/training/zero")->setCurrentText(QStringLiteral("0"));
    QVERIFY2(w.training_view()->verdict().startsWith(QStringLiteral("Does not fit")),
             qPrintable(w.training_view()->verdict()));
    QVERIFY(!w.current_report().isEmpty());  // "does not fit" is an answer with its breakdown
    // As the CLI's table: no step time or operators for a layout that cannot run, but the
    // single changes that would make it fit, each with the stage it leaves.
    QVERIFY(w.training_view()->step_values().empty());
    QVERIFY(w.training_view()->operator_rows().empty());
    const json r = json::parse(w.current_report().toStdString());
    const QString summary = w.training_view()->summary();
    QVERIFY2(summary.startsWith(QStringLiteral("No step time: the layout does not fit.")), qPrintable(summary));
    QVERIFY(!r["does_not_fit"]["remedies"].empty());
    for (const json& f : r["does_not_fit"]["remedies"])
      QVERIFY2(summary.contains(QStringLiteral("  %1: %2 GiB, %3")
                                    .arg(QString::fromStdString(f["change"].get<std::string>()))
                                    .arg(f["peak_bytes"].get<double>() / kGiB, 0, 'f', 2)
                                    .arg(f["fits"].get<bool>() ? QStringLiteral("fits") : QStringLiteral("still too large"))),
               qPrintable(summary));
  }

  /// A MoE layout with expert parallelism says how its tokens travel and whether the
  /// all-to-all overlaps another microbatch, as the CLI's "experts" line does.
  void moe_notes_name_the_dispatch() {
    gui::MainWindow w;
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("qwen3-30b-a3b"));
    field<QSpinBox>(w, "/training/ep")->setValue(8);
    field<QComboBox>(w, "/training/precision")->setCurrentText(QStringLiteral("fp8"));
    QVERIFY2(w.panel()->issue_text().isEmpty(), qPrintable(w.panel()->issue_text()));
    QVERIFY2(w.training_view()->notes().contains(QStringLiteral("Experts: alltoall dispatch\n")),
             qPrintable(w.training_view()->notes()));
    field<QComboBox>(w, "/training/ep_overlap")->setCurrentText(QStringLiteral("on"));
    QVERIFY2(w.panel()->issue_text().isEmpty(), qPrintable(w.panel()->issue_text()));
    QVERIFY2(w.training_view()->notes().contains(
                 QStringLiteral("Experts: alltoall dispatch, all-to-all overlapped with another microbatch's computation")),
             qPrintable(w.training_view()->notes()));
  }

  /// The window's size and layout and the recent files outlive the window (QSettings): the
  /// next window opens at the same size with the file under File > Open recent.
  void window_state_and_recent_files_persist() {
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("recent.json"));
    {
      gui::MainWindow w;
      w.resize(1333, 777);
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      QVERIFY(w.save_file(path));
      QVERIFY(w.close());
    }
    QSettings settings;
    QVERIFY(settings.contains(QStringLiteral("geometry")));
    QVERIFY(settings.contains(QStringLiteral("window_state")));
    gui::MainWindow again;
    QCOMPARE(again.size(), QSize(1333, 777));
    QCOMPARE(again.recent_files().value(0), QFileInfo(path).absoluteFilePath());
    QAction* recent = nullptr;
    for (QMenu* m : again.findChildren<QMenu*>())
      for (QAction* a : m->actions())
        if (a->text() == QFileInfo(path).absoluteFilePath()) recent = a;
    QVERIFY(recent);
    recent->trigger();  // opens the file
    QCOMPARE(again.windowTitle(), QStringLiteral("capsim - recent.json"));
    // Back to the size the other tests expect.
    again.resize(1280, 860);
    again.show();
    QVERIFY(QTest::qWaitForWindowExposed(&again));
    QVERIFY(again.close());
  }

  /// At 1280 x 800 no menu of the editor clips its text, "auto" entries with what they
  /// resolved to ("default -> cached") included, on either tab.
  void editor_menus_are_not_clipped_at_1280() {
    gui::MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(30);
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    QVERIFY(field<QComboBox>(w, "/inference/engine/preemption")->currentText().contains(QStringLiteral("cached")));
    for (auto kind : {gui::ScenarioKind::inference, gui::ScenarioKind::training}) {
      w.panel()->set_kind(kind);
      QCOMPARE(w.width(), 1280);  // nothing asks for a wider window
      QTest::qWait(50);
      for (QComboBox* c : w.panel()->findChildren<QComboBox*>()) {
        if (!c->isVisible()) continue;
        // The width the style needs around the text (frame, margins, arrow).
        QStyleOptionComboBox opt;
        opt.initFrom(c);
        opt.frame = true;
        const QSize text(c->fontMetrics().horizontalAdvance(c->currentText()), c->fontMetrics().height());
        const int needed = c->style()->sizeFromContents(QStyle::CT_ComboBox, &opt, text, c).width();
        QVERIFY2(c->width() >= needed, qPrintable(QStringLiteral("%1: \"%2\" in %3 px (needs %4)")
                                                     .arg(c->objectName(), c->currentText())
                                                     .arg(c->width())
                                                     .arg(needed)));
      }
    }
  }

  void saved_scenario_reopens_to_the_cli_report() {
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("saved.json"));
    {
      gui::MainWindow w;
      field<QSpinBox>(w, "/training/pp")->setValue(2);
      field<QComboBox>(w, "/training/recompute")->setCurrentText(QStringLiteral("full"));
      QVERIFY(w.save_file(path));
      QCOMPARE(w.recent_files().value(0), QFileInfo(path).absoluteFilePath());
    }
    gui::MainWindow w;
    QVERIFY(w.open_file(path));
    const Scenario s = io::load_scenario(path.toStdString());
    const io::CostModels costs(s.system, nullptr);
    QCOMPARE(w.current_report().toStdString(),
             io::dump(io::analytical_train_report(s, evaluate_training(s, &costs.get()))));
    // A file written by hand, with auto fields and keys the editor does not show.
    const QString example = QStringLiteral(CAPSIM_SOURCE_DIR "/examples/llama3-8b-h100.json");
    QVERIFY(w.open_file(example));
    const Scenario e = io::load_scenario(example.toStdString());
    const io::CostModels ecosts(e.system, nullptr);
    QCOMPARE(w.current_report().toStdString(),
             io::dump(io::analytical_train_report(e, evaluate_training(e, &ecosts.get()))));
    const QString exported = dir.filePath(QStringLiteral("report.json"));
    QVERIFY(w.export_report(exported));
    QFile f(exported);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(f.readAll()), w.current_report());
  }

  /// File > Export: the JSON is the library's report for an example, byte for byte; the CSV
  /// lists its metrics with units; the charts render to PNG and SVG; no temporary file stays.
  void exports_report_csv_and_charts() {
    gui::MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const QString example = QStringLiteral(CAPSIM_SOURCE_DIR "/examples/llama3-8b-h100.json");
    QVERIFY(w.open_file(example));
    const Scenario e = io::load_scenario(example.toStdString());
    const io::CostModels costs(e.system, nullptr);
    const json r = io::analytical_train_report(e, evaluate_training(e, &costs.get()));
    QTemporaryDir dir;
    auto read = [](const QString& path) {
      QFile f(path);
      if (!f.open(QIODevice::ReadOnly)) qFatal("cannot read %s", qPrintable(path));
      return f.readAll();
    };
    const QString json_path = dir.filePath(QStringLiteral("report.json"));
    QVERIFY(w.export_report(json_path));
    QCOMPARE(read(json_path).toStdString(), io::dump(r));

    const QString csv_path = dir.filePath(QStringLiteral("report.csv"));
    QVERIFY(w.export_report_csv(csv_path));
    const QStringList lines = QString::fromUtf8(read(csv_path)).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.value(0), QStringLiteral("key,value,unit"));
    QCOMPARE(static_cast<size_t>(lines.size()), gui::report_metrics(r).size() + 1);
    const QString step_row = QStringLiteral("time.step_s,%1,s").arg(QString::fromStdString(r["time"]["step_s"].dump()));
    QVERIFY2(lines.contains(step_row), qPrintable(step_row));
    QCOMPARE(gui::unit_of("memory.stages.0.weights_bytes"), std::string("bytes"));
    QCOMPARE(gui::unit_of("time.tokens_per_s_per_gpu"), std::string("tokens/s/GPU"));
    QCOMPARE(gui::unit_of("time.flops.model_per_step"), std::string("FLOP"));
    QCOMPARE(gui::unit_of("layout.tp"), std::string());

    const QList<QGraphicsView*> charts = w.visible_charts();
    QCOMPARE(charts.size(), qsizetype{2});
    QCOMPARE(gui::MainWindow::chart_name(charts[0]), QStringLiteral("Memory per GPU by pipeline stage"));
    const QString png = dir.filePath(QStringLiteral("memory.png"));
    QVERIFY(w.export_chart(png, 0));
    const QImage image(png);
    QVERIFY(!image.isNull() && image.width() > 0 && image.height() > 0);
    const QString svg = dir.filePath(QStringLiteral("step.svg"));
    QVERIFY(w.export_chart(svg, 1));
    const QByteArray svg_text = read(svg);
    QVERIFY(svg_text.contains("<svg") && svg_text.contains("</svg>"));
    QVERIFY(!w.export_chart(dir.filePath(QStringLiteral("none.png")), 2));
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), qsizetype{4});
  }

  /// Pin, change tp: the compare table's step-time row is the two reports' step times.
  void compare_shows_the_pinned_and_current_reports() {
    gui::MainWindow w;
    QVERIFY(!w.compare_view()->row(QStringLiteral("time.step_s")));
    const json before_doc = w.panel()->document(gui::ScenarioKind::training);
    QVERIFY(w.pin_report());
    QCOMPARE(w.compare_view()->shown_rows(), 0);  // nothing differs yet
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    const json before = cli_train_report(before_doc);
    const json after = cli_train_report(w.panel()->document(gui::ScenarioKind::training));
    QCOMPARE(w.current_report().toStdString(), io::dump(after));
    const double p = before["time"]["step_s"].get<double>(), c = after["time"]["step_s"].get<double>();
    QVERIFY(p != c);
    const std::optional<gui::CompareRow> row = w.compare_view()->row(QStringLiteral("time.step_s"));
    QVERIFY(row);
    QCOMPARE(row->pinned, p);
    QCOMPARE(row->current, c);
    QCOMPARE(row->difference, c - p);
    QCOMPARE(row->relative, (c - p) / p);
    QCOMPARE(row->unit, QStringLiteral("s"));
    QVERIFY(row->differs);
    const std::optional<gui::CompareRow> tp = w.compare_view()->row(QStringLiteral("layout.tp"));
    QVERIFY(tp && tp->differs);
    QCOMPARE(tp->difference, after["layout"]["tp"].get<double>() - before["layout"]["tp"].get<double>());
    QVERIFY(w.compare_view()->shown_rows() > 0 && w.compare_view()->shown_rows() < w.compare_view()->rows());
    w.compare_view()->set_only_differences(false);
    QCOMPARE(w.compare_view()->shown_rows(), w.compare_view()->rows());
    w.unpin_report();
    QCOMPARE(w.compare_view()->rows(), 0);
  }

  /// Pin a serving report, change tp: the compare rows are the two library reports' numbers;
  /// the editor showing training says the kinds differ and still compares serving.
  void compare_shows_pinned_and_current_serving_reports() {
    gui::MainWindow w;
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(40);
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    const json before_doc = w.panel()->document(gui::ScenarioKind::inference);
    QVERIFY(w.pin_report());
    QCOMPARE(w.pinned_kind(), gui::ScenarioKind::inference);
    QCOMPARE(w.compare_view()->shown_rows(), 0);
    QVERIFY2(w.compare_view()->status().contains(QStringLiteral("serving")), qPrintable(w.compare_view()->status()));
    field<QSpinBox>(w, "/inference/tp")->setValue(2);
    QVERIFY(done.wait(120000));
    auto library_report = [](const json& doc) {
      const Scenario s = gui::read_serving_document(doc, {});
      const io::CostModels costs(s.system, nullptr);
      return io::serving_report(s, simulate_serving_runs(s, costs.get(), gui::kDefaultSeed, true));
    };
    const json before = library_report(before_doc);
    const json after = library_report(w.panel()->document(gui::ScenarioKind::inference));
    QCOMPARE(w.current_report().toStdString(), io::dump(after));
    int compared = 0;
    for (const char* key : {"ttft_p99_ms", "tpot_p50_ms", "itl_p90_ms", "e2e_mean_ms", "throughput_tokens_per_s",
                            "goodput_requests_per_s", "requests_per_s"}) {
      const QString k = QStringLiteral("metrics.") + QString::fromUtf8(key);
      const std::optional<gui::CompareRow> row = w.compare_view()->row(k);
      QVERIFY2(row, qPrintable(k));
      QCOMPARE(row->pinned, before["metrics"][key].get<double>());
      QCOMPARE(row->current, after["metrics"][key].get<double>());
      QCOMPARE(row->difference, row->current - row->pinned);
      ++compared;
    }
    QCOMPARE(compared, 7);
    const std::optional<gui::CompareRow> kv = w.compare_view()->row(QStringLiteral("run.peak_kv_utilization"));
    QVERIFY(kv);
    QCOMPARE(kv->pinned, before["run"]["peak_kv_utilization"].get<double>());
    QCOMPARE(kv->current, after["run"]["peak_kv_utilization"].get<double>());
    const std::optional<gui::CompareRow> tp = w.compare_view()->row(QStringLiteral("layout.tp"));
    QVERIFY(tp && tp->differs);
    QCOMPARE(tp->pinned, 1.0);
    QCOMPARE(tp->current, 2.0);
    QVERIFY(!w.compare_view()->status().contains(QStringLiteral("different kind")));
    // The editor on training: the serving pin still compares with the serving report, and says so.
    w.panel()->set_kind(gui::ScenarioKind::training);
    QVERIFY2(w.compare_view()->status().contains(QStringLiteral("different kind")), qPrintable(w.compare_view()->status()));
    QCOMPARE(w.compare_view()->row(QStringLiteral("metrics.ttft_p99_ms"))->current,
             after["metrics"]["ttft_p99_ms"].get<double>());
    QVERIFY(!w.compare_view()->row(QStringLiteral("time.step_s")));
    // Pinning on the training side replaces it with a training pin.
    QVERIFY(w.pin_report());
    QCOMPARE(w.pinned_kind(), gui::ScenarioKind::training);
    QVERIFY(w.compare_view()->row(QStringLiteral("time.step_s")));
    QVERIFY(!w.compare_view()->row(QStringLiteral("metrics.ttft_p99_ms")));
  }

  /// A serving benchmark's recovered steps against the serving scenario's model: the rows of
  /// `capsim calibrate serving-steps` with that scenario, the fitted host time, and the button
  /// that puts it in the scenario; a file that is not a result shows the reader's message.
  void serving_steps_view_shows_a_result_and_applies_its_host_time() {
    const QString result = QStringLiteral(CAPSIM_SOURCE_DIR "/tests/data/serving-steps/synthetic-result.json");
    gui::MainWindow w;
    QVERIFY(w.open_serving_result(result));
    QCOMPARE(w.views()->currentWidget(), static_cast<QWidget*>(w.serving_steps_view()));
    QVERIFY(w.serving_steps_view()->error().isEmpty());
    QVERIFY2(w.serving_steps_view()->info().startsWith(QStringLiteral("24 of 24 requests placed on 143 steps (3.57 s)")),
             qPrintable(w.serving_steps_view()->info()));
    const Scenario s = gui::read_serving_document(w.panel()->document(gui::ScenarioKind::inference), {});
    const io::CostModels costs(s.system, nullptr);
    const nlohmann::json r =
        io::analyze_serving_steps(io::read_benchmark_requests(result.toStdString()), 8, &s, &costs.get());
    std::vector<QPointF> measured, model;
    for (const auto& row : r["decode_steps"]) {
      measured.emplace_back(row["mean_decodes"].get<double>(), row["median_ms"].get<double>());
      if (row.contains("predicted_median_ms"))
        model.emplace_back(row["mean_decodes"].get<double>(), row["predicted_median_ms"].get<double>());
    }
    QVERIFY(!model.empty());
    QCOMPARE(w.serving_steps_view()->points(QStringLiteral("measured")), measured);
    QCOMPARE(w.serving_steps_view()->points(QStringLiteral("model")), model);
    const double fitted = r["fit"]["step_overhead_ms"].get<double>();
    QVERIFY(w.serving_steps_view()->fitted_host_ms().has_value());
    QCOMPARE(*w.serving_steps_view()->fitted_host_ms(), fitted);
    QVERIFY(w.serving_steps_view()->fit_text().contains(QString::number(fitted, 'f', 2)));
    auto* apply = w.serving_steps_view()->findChild<QPushButton*>(QStringLiteral("apply_host_time"));
    QVERIFY(apply && apply->isEnabled());
    apply->click();
    const nlohmann::json& engine = w.panel()->document(gui::ScenarioKind::inference)["inference"]["engine"];
    QCOMPARE(engine["step_overhead_ms"].get<double>(), std::round(fitted * 100.0) / 100.0);
    QCOMPARE(engine.contains("eager_host_us_per_layer"), r["fit"].contains("eager_host_us_per_layer"));
    if (r["fit"].contains("eager_host_us_per_layer"))
      QCOMPARE(engine["eager_host_us_per_layer"].get<double>(), std::round(r["fit"]["eager_host_us_per_layer"].get<double>()));
    // Not a benchmark result: the reader's problems, and no chart.
    QVERIFY(!w.open_serving_result(QStringLiteral(CAPSIM_SOURCE_DIR "/tests/scenarios/llama2-7b-8gpu.json")));
    QVERIFY2(w.serving_steps_view()->error().contains(QStringLiteral("#/ttfts: missing")),
             qPrintable(w.serving_steps_view()->error()));
    QVERIFY(w.serving_steps_view()->points(QStringLiteral("measured")).empty());
    QVERIFY(!w.serving_steps_view()->fitted_host_ms().has_value());
  }

  /// A profile's grouped expert GEMM tables (fitted from the H100 measurements in
  /// data/calibration/raw/) are GEMM choices of their own, "bf16 x128 experts", each point's
  /// FLOPs over all the experts against the default model's batched GEMM.
  void calibration_view_charts_grouped_gemm_tables() {
    const RawFile raw = io::read_raw(CAPSIM_SOURCE_DIR "/data/calibration/raw/h100-torch-probe-grouped.jsonl");
    const CalibrationProfile p = fit_profile({raw}, "grouped");
    const QString path = QDir::temp().filePath(QStringLiteral("capsim-gui-grouped-profile.json"));
    io::write_file_atomic(path.toStdString(), io::profile_to_json(p));
    gui::MainWindow w;
    QVERIFY(w.open_calibration(path));
    QVERIFY(w.calibration_view()->error().isEmpty());
    const Scenario s = io::scenario_from_json(w.panel()->document(gui::ScenarioKind::training));
    QVERIFY(io::profile_matches(p, s.system.gpu));
    const hw::RooflineCostModel model(s.system);
    const GemmTable* g = p.grouped_gemm_table(DType::bf16, 128);
    QVERIFY(g != nullptr);
    QVERIFY(w.calibration_view()->select_gemm(QStringLiteral("bf16 x128 experts")));
    const double peak = s.system.gpu.peak(DType::bf16).value;
    std::vector<QPointF> measured, modelled;
    for (size_t i = 0; i < g->tflops.size(); ++i) {
      const double flops = 2.0 * static_cast<double>(g->m[i]) * static_cast<double>(g->n[i]) * static_cast<double>(g->k[i]) * 128.0;
      measured.emplace_back(flops, 100 * (g->tflops[i] * 1e12 / peak));
      modelled.emplace_back(flops, 100 * (flops / model.gemm(g->m[i], g->n[i], g->k[i], DType::bf16, 128).value / peak));
    }
    QCOMPARE(w.calibration_view()->gemm_points(QStringLiteral("measured")), measured);
    QCOMPARE(w.calibration_view()->gemm_points(QStringLiteral("default model")), modelled);
    QVERIFY(!w.calibration_view()->select_gemm(QStringLiteral("bf16 x64 experts")));
    QFile::remove(path);
  }

  /// A profile's GEMM efficiencies and collective bus bandwidths against the default model
  /// of the training scenario's system; a profile that does not read shows the CLI's message.
  void calibration_view_charts_a_profile_and_a_bad_ones_error() {
    // gui/tests/data/sample-profile.json is `capsim calibrate fit sample-raw.jsonl`.
    const QString good = QStringLiteral(CAPSIM_SOURCE_DIR "/gui/tests/data/sample-profile.json");
    gui::MainWindow w;
    QVERIFY(w.open_calibration(good));
    QCOMPARE(w.views()->currentWidget(), static_cast<QWidget*>(w.calibration_view()));
    QVERIFY(w.calibration_view()->error().isEmpty());
    const CalibrationProfile p = io::read_profile(good.toStdString());
    const Scenario s = io::scenario_from_json(w.panel()->document(gui::ScenarioKind::training));
    QVERIFY(io::profile_matches(p, s.system.gpu));
    QVERIFY(w.calibration_view()->info().contains(QString::fromStdString(s.system.gpu.id)));
    const hw::RooflineCostModel model(s.system);
    QCOMPARE(p.gemm.size(), size_t{1});
    const GemmTable& g = p.gemm.front();
    const double peak = s.system.gpu.peak(g.dtype).value;
    std::vector<QPointF> measured, modelled;
    for (size_t i = 0; i < g.tflops.size(); ++i) {
      const double flops = 2.0 * static_cast<double>(g.m[i]) * static_cast<double>(g.n[i]) * static_cast<double>(g.k[i]);
      measured.emplace_back(flops, 100 * (g.tflops[i] * 1e12 / peak));
      modelled.emplace_back(flops, 100 * (flops / model.gemm(g.m[i], g.n[i], g.k[i], g.dtype).value / peak));
    }
    QCOMPARE(w.calibration_view()->gemm_points(QStringLiteral("measured")), measured);
    QCOMPARE(w.calibration_view()->gemm_points(QStringLiteral("default model")), modelled);
    QCOMPARE(w.calibration_view()->collective_labels().size(), static_cast<qsizetype>(p.collectives.size()));
    for (const CollectiveFit& f : p.collectives) {
      QVERIFY(f.op == CalOp::all_reduce || f.op == CalOp::all_gather);
      const QString label = QStringLiteral("%1 x%2 intra-node").arg(QString::fromUtf8(to_string(f.op).data())).arg(f.ranks);
      QVERIFY2(w.calibration_view()->select_collective(label), qPrintable(label));
      const double factor = busbw_factor(f.op, f.ranks);
      const CollectiveKind kind = f.op == CalOp::all_reduce ? CollectiveKind::all_reduce : CollectiveKind::all_gather;
      std::vector<QPointF> bus, bus_model;
      for (size_t i = 0; i < f.size_bytes.size(); ++i) {
        const double b = f.size_bytes[i];
        bus.emplace_back(b, b * factor / f.time_s[i] / 1e9);
        bus_model.emplace_back(b, b * factor / model.collective(kind, Bytes(b), Group{f.ranks, f.ranks}).value / 1e9);
      }
      QCOMPARE(w.calibration_view()->collective_points(QStringLiteral("measured")), bus);
      QCOMPARE(w.calibration_view()->collective_points(QStringLiteral("default model")), bus_model);
      QVERIFY(w.calibration_view()->collective_axis_is_log());
    }
    // A broken profile: the message `capsim calibrate show` prints, inline, and no chart.
    const QString bad = QStringLiteral(CAPSIM_SOURCE_DIR "/gui/tests/data/broken-profile.json");
    QVERIFY(!w.open_calibration(bad));
    const CliRun cli = run_cli({QStringLiteral("calibrate"), QStringLiteral("show"), bad, QStringLiteral("--format"),
                                QStringLiteral("json")});
    QCOMPARE(cli.code, 1);
    QVERIFY(!w.calibration_view()->error().isEmpty());
    QCOMPARE(QStringLiteral("capsim: ") + w.calibration_view()->error() + QStringLiteral("\n"), cli.err);
    QVERIFY(w.calibration_view()->gemm_points(QStringLiteral("measured")).empty());
    QVERIFY(w.calibration_view()->collective_points(QStringLiteral("measured")).empty());
    // Not JSON at all: the reader's message too.
    QTemporaryDir dir;
    const QString garbage = dir.filePath(QStringLiteral("garbage.json"));
    QFile f(garbage);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"schema\": ");
    f.close();
    QVERIFY(!w.open_calibration(garbage));
    const CliRun cli2 = run_cli({QStringLiteral("calibrate"), QStringLiteral("show"), garbage});
    QCOMPARE(QStringLiteral("capsim: ") + w.calibration_view()->error() + QStringLiteral("\n"), cli2.err);
  }

  /// "Use this profile for predictions": the training and serving reports are the CLI's
  /// with --calibration, byte for byte, and the library's with the calibrated cost model.
  void calibration_profile_applies_to_predictions() {
    const QString profile = QStringLiteral(CAPSIM_SOURCE_DIR "/gui/tests/data/sample-profile.json");
    gui::MainWindow w;
    const QString plain = w.current_report();
    QVERIFY(!plain.isEmpty());
    QVERIFY(!w.calibration_in_use());
    w.set_use_calibration(true);  // no profile yet: nothing to use
    QVERIFY(!w.calibration_in_use());
    QVERIFY(w.open_calibration(profile));
    QCOMPARE(w.current_report(), plain);  // reading a profile alone changes nothing
    w.set_use_calibration(true);
    QVERIFY(w.calibration_in_use());
    QVERIFY(w.calibration_view()->use_for_predictions());

    const CalibrationProfile p = io::read_profile(profile.toStdString());
    const Scenario s = io::scenario_from_json(w.panel()->document(gui::ScenarioKind::training));
    const io::CostModels costs(s.system, &p);
    QVERIFY(costs.calibrated());
    json expected = io::analytical_train_report(s, evaluate_training(s, &costs.get()));
    QVERIFY(io::add_calibration(expected, p, &s.system.gpu));
    QVERIFY(expected["calibration"]["applied"].get<bool>());
    QTemporaryDir dir;
    const QString exported = dir.filePath(QStringLiteral("train-report.json"));
    QVERIFY(w.export_report(exported));
    QFile f(exported);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray bytes = f.readAll();
    QCOMPARE(bytes.toStdString(), io::dump(expected));
    QVERIFY(w.current_report() != plain);
    const json calibrated = json::parse(bytes.toStdString());
    QVERIFY(calibrated["time"]["step_s"] != json::parse(plain.toStdString())["time"]["step_s"]);
    // The command line on the same scenario file, with --calibration, prints the same bytes.
    const QString train_file = dir.filePath(QStringLiteral("train.json"));
    QVERIFY(w.save_file(train_file));
    const CliRun train = run_cli({QStringLiteral("train"), train_file, QStringLiteral("--calibration"), profile,
                                  QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(train.code, 0);
    QCOMPARE(train.out, QString::fromUtf8(bytes));

    // Serving: the report `capsim infer --calibration` prints.
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(40);
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    const QString serve_file = dir.filePath(QStringLiteral("serve.json"));
    QVERIFY(w.save_file(serve_file));
    const CliRun infer = run_cli({QStringLiteral("infer"), serve_file, QStringLiteral("--calibration"), profile,
                                  QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(infer.code, 0);
    QCOMPARE(w.current_report(), infer.out);
    QVERIFY(json::parse(w.current_report().toStdString()).contains("calibration"));

    // Cleared: the default model again.
    w.set_use_calibration(false);
    QVERIFY(!w.calibration_in_use());
    w.panel()->set_kind(gui::ScenarioKind::training);
    QCOMPARE(w.current_report(), plain);
  }

  /// Latency against load: the curve, the SLA lines and the max-QPS mark are the library's.
  void serving_latency_against_qps_marks_the_max_rate() {
    gui::MainWindow w;
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(60);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    ServingSla sla;
    sla.ttft_p99_ms = 700;
    sla.tpot_p99_ms = 40;
    w.serving_view()->set_sla(sla);
    QSignalSpy done(&w, &gui::MainWindow::qps_finished);
    w.run_qps_now();
    QVERIFY(w.serving_view()->qps_running());
    QVERIFY(done.wait(240000));
    const Scenario s = gui::read_serving_document(w.panel()->document(gui::ScenarioKind::inference), {});
    const io::CostModels costs(s.system, nullptr);
    const double best = max_qps(s, costs.get(), sla, gui::kDefaultSeed);
    QVERIFY(best > 0);
    ProgressCounter probes;
    const gui::QpsCurve c = gui::run_qps_curve(s, sla, gui::kDefaultSeed, nullptr, nullptr, &probes);
    QCOMPARE(c.max_qps, best);
    // Progress: max_qps's probes, then one per point of the curve; all done at the end.
    QCOMPARE(probes.done.load(), probes.total.load());
    QVERIFY(probes.done.load() > static_cast<int64_t>(c.points.size()));
    w.run_qps_now();
    w.serving_view()->show_qps_progress(2, 10);
    QCOMPARE(w.findChild<QLabel*>(QStringLiteral("qps_status"))->text(),
             QStringLiteral("Searching for the highest rate within the SLA: probe 3 of about 10 ..."));
    QVERIFY(done.wait(240000));
    std::vector<QPointF> ttft, tpot;
    for (const gui::QpsPoint& p : c.points) {
      ttft.emplace_back(p.qps, p.ttft_p99_ms);
      tpot.emplace_back(p.qps, p.tpot_p99_ms);
    }
    QCOMPARE(w.serving_view()->qps_points(QStringLiteral("TTFT p99")), ttft);
    QCOMPARE(w.serving_view()->qps_points(QStringLiteral("TPOT p99")), tpot);
    // At the max rate the medians of the runs' P99s meet the SLA (the CLI's probe).
    Scenario probe = s;
    probe.inference->workload.mode = ServingWorkload::Mode::poisson;
    probe.inference->workload.qps = best;
    const auto [t99, p99] = p99_latencies(simulate_serving_runs(probe, costs.get(), gui::kDefaultSeed));
    QVERIFY(std::find(ttft.begin(), ttft.end(), QPointF(best, t99)) != ttft.end());
    QVERIFY(std::find(tpot.begin(), tpot.end(), QPointF(best, p99)) != tpot.end());
    for (const QPointF& pt : w.serving_view()->qps_points(QStringLiteral("TTFT SLA"))) QCOMPARE(pt.y(), sla.ttft_p99_ms);
    for (const QPointF& pt : w.serving_view()->qps_points(QStringLiteral("TPOT SLA"))) QCOMPARE(pt.y(), sla.tpot_p99_ms);
    const std::vector<QPointF> mark = w.serving_view()->qps_points(QStringLiteral("max QPS"));
    QCOMPARE(mark.size(), size_t{2});
    QCOMPARE(mark[0].x(), best);
    QCOMPARE(mark[1].x(), best);
    QVERIFY(w.serving_view()->qps_status().contains(QString::number(best, 'f', 3)));
    QVERIFY(w.serving_view()->qps_series().contains(QStringLiteral("max QPS %1").arg(best, 0, 'f', 3)));
    // An edit makes the curve stale: it is cleared.
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(50);
    QVERIFY(w.serving_view()->qps_points(QStringLiteral("TTFT p99")).empty());
  }

  void serving_p99_ttft_is_the_simulators() {
    gui::MainWindow w;
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(60);
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    const Scenario s = gui::read_serving_document(w.panel()->document(gui::ScenarioKind::inference), {});
    const io::CostModels costs(s.system, nullptr);
    const std::vector<ServingResult> runs = simulate_serving_runs(s, costs.get(), gui::kDefaultSeed, true);
    const json m = io::serving_metrics(runs);
    QCOMPARE(w.serving_view()->cell(QStringLiteral("ttft"), QStringLiteral("p99")), m["ttft_p99_ms"].get<double>());
    QCOMPARE(w.serving_view()->cell(QStringLiteral("tpot"), QStringLiteral("p50")), m["tpot_p50_ms"].get<double>());
    QCOMPARE(w.current_report().toStdString(), io::dump(io::serving_report(s, runs)));
    // Under the table, the first run's engine time by part, largest first, as the report has it.
    const auto shares = io::busy_shares(io::serving_report(s, runs)["busy_by_part"]);
    QVERIFY(!shares.empty());
    const QString first = QStringLiteral("Engine time: %1 %2%")
                              .arg(gui::ServingView::part_label(shares.front().first))
                              .arg(100.0 * shares.front().second, 0, 'f', 1);
    QVERIFY2(w.serving_view()->time_by_part().startsWith(first), qPrintable(w.serving_view()->time_by_part()));
  }

  /// The chart over time draws the first run's timeline (simulate_serving with the same
  /// seed) after downsampling; an edit clears it and the re-run draws the new timeline.
  void serving_over_time_is_the_simulators_timeline() {
    gui::MainWindow w;
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(60);
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    auto expect = [&w] {
      const Scenario s = gui::read_serving_document(w.panel()->document(gui::ScenarioKind::inference), {});
      const io::CostModels costs(s.system, nullptr);
      return expected_over_time(simulate_serving(s, costs.get(), gui::kDefaultSeed, true).timeline,
                                gui::kOverTimePoints);
    };
    const auto [kv, batch] = expect();
    QVERIFY(kv.size() > 10);
    QCOMPARE(w.serving_view()->over_time_points(QStringLiteral("KV cache")), kv);
    QCOMPARE(w.serving_view()->over_time_points(QStringLiteral("batch")), batch);
    const QString hover = w.serving_view()->over_time_hover(kv[5].x());
    QVERIFY2(hover.contains(QString::number(kv[5].y(), 'f', 1) + QLatin1Char('%')), qPrintable(hover));
    QVERIFY2(hover.contains(QStringLiteral("batch %1 decodes").arg(batch[5].y())), qPrintable(hover));

    // An edit clears the chart; the re-run draws the new document's timeline.
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(120);
    QVERIFY(w.serving_view()->over_time_points(QStringLiteral("KV cache")).empty());
    QVERIFY(w.serving_view()->over_time_hover(kv[5].x()).isEmpty());
    QVERIFY(done.wait(120000));
    const auto [kv2, batch2] = expect();
    QVERIFY(kv2 != kv);
    QCOMPARE(w.serving_view()->over_time_points(QStringLiteral("KV cache")), kv2);
    QCOMPARE(w.serving_view()->over_time_points(QStringLiteral("batch")), batch2);
  }

  /// --bench-repaint's timing loop edits the training scenario and reports every edit; the
  /// figures are reported, never compared with a limit (they depend on the machine).
  void repaint_benchmark_times_each_edit() {
    gui::MainWindow w;
    w.resize(1280, 800);
    const gui::RepaintTimes t = gui::time_training_repaints(w, 3);
    QCOMPARE(t.recompute_ms.size(), size_t{3});
    QCOMPARE(t.total_ms.size(), size_t{3});
    for (size_t i = 0; i < 3; ++i) QVERIFY(t.total_ms[i] >= t.recompute_ms[i] && t.recompute_ms[i] > 0);
    // Three edits from tp 1 (two warm-ups): the window shows tp 2's report.
    QCOMPARE(field<QSpinBox>(w, "/training/tp")->value(), 2);
    QCOMPARE(json::parse(w.current_report().toStdString()), cli_train_report(w.panel()->document(gui::ScenarioKind::training)));
    const QString summary = gui::repaint_summary(t);
    QVERIFY2(summary.contains(QStringLiteral("machine: ")) && summary.contains(QStringLiteral("p90")), qPrintable(summary));
    QVERIFY(summary.contains(QStringLiteral("edits: 3")));
  }

  /// --bench-serving-repaint's loop: each edit is simulated and shown; the window ends on
  /// the report `capsim infer` gives for the last document.
  void serving_repaint_benchmark_times_each_edit() {
    gui::MainWindow w;
    w.resize(1280, 800);
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(40);
    const gui::RepaintTimes t = gui::time_serving_repaints(w, 2);
    QCOMPARE(t.recompute_ms.size(), size_t{2});
    for (size_t i = 0; i < 2; ++i) QVERIFY(t.total_ms[i] >= t.recompute_ms[i] && t.recompute_ms[i] > 0);
    QCOMPARE(field<QSpinBox>(w, "/inference/tp")->value(), 2);  // three edits from tp 1 (one warm-up)
    const Scenario s = gui::read_serving_document(w.panel()->document(gui::ScenarioKind::inference), {});
    const io::CostModels costs(s.system, nullptr);
    QCOMPARE(w.current_report().toStdString(),
             io::dump(io::serving_report(s, simulate_serving_runs(s, costs.get(), gui::kDefaultSeed, true))));
    const QString summary = gui::serving_repaint_summary(t);
    QVERIFY2(summary.contains(QStringLiteral("machine: ")) && summary.contains(QStringLiteral("edits: 2")),
             qPrintable(summary));
  }

  /// Long timelines keep each bucket's peak, at most the given number of points.
  void over_time_downsampling_keeps_the_peaks() {
    const Scenario s = gui::read_serving_document(gui::MainWindow().panel()->document(gui::ScenarioKind::inference), {});
    const io::CostModels costs(s.system, nullptr);
    const ServingResult r = simulate_serving(s, costs.get(), gui::kDefaultSeed, true);
    for (size_t max_points : {size_t{7}, size_t{50}, size_t{100000}}) {
      const gui::ServingOverTime t = gui::serving_over_time(r.timeline, max_points);
      const auto [kv, batch] = expected_over_time(r.timeline, max_points);
      QCOMPARE(t.start_s.size(), kv.size());
      QVERIFY(t.start_s.size() <= max_points);
      for (size_t i = 0; i < kv.size(); ++i) {
        QCOMPARE(QPointF(t.start_s[i], t.kv_percent[i]), kv[i]);
        QCOMPARE(QPointF(t.start_s[i], t.batch[i]), batch[i]);
      }
      QCOMPARE(*std::max_element(t.kv_percent.begin(), t.kv_percent.end()), r.peak_kv_utilization * 100.0);
    }
  }

  void cancelled_or_stale_serving_runs_are_dropped() {
    gui::MainWindow w;
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);  // starts a run
    QVERIFY(w.serving_view()->running());
    w.cancel_serving();
    QVERIFY(!w.serving_view()->running());
    QVERIFY(!done.wait(3000));
    QVERIFY(w.current_report().isEmpty());
    QVERIFY(std::isnan(w.serving_view()->cell(QStringLiteral("ttft"), QStringLiteral("p99"))));
    // An edit while a run is in flight: only the newer document's result shows.
    w.run_serving_now();
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(30);
    QVERIFY(done.wait(120000));
    QCOMPARE(done.count(), 1);
    QVERIFY(w.current_report().contains(QStringLiteral("\"requests\": 30")));
  }

  /// The model and the system belong to both documents: an edit made while the Training
  /// tab is in front leaves no serving result of the old model behind; the Serving tab
  /// runs the new document and shows its report.
  void shared_edit_behind_the_serving_tab_drops_its_result() {
    gui::MainWindow w;
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(30);
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    const QString before = w.current_report();
    QVERIFY(!before.isEmpty());

    w.panel()->set_kind(gui::ScenarioKind::training);
    auto* model = field<QComboBox>(w, "/model");
    QVERIFY(model->currentText() != QStringLiteral("mistral-7b"));
    model->setCurrentIndex(model->findData(QStringLiteral("mistral-7b")));
    field<QSpinBox>(w, "/system/num_gpus")->setValue(field<QSpinBox>(w, "/system/num_gpus")->value() * 2);
    const json serving_doc = w.panel()->document(gui::ScenarioKind::inference);
    QCOMPARE(serving_doc["model"], w.panel()->document(gui::ScenarioKind::training)["model"]);
    QCOMPARE(serving_doc["system"], w.panel()->document(gui::ScenarioKind::training)["system"]);

    done.clear();
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(w.current_report().isEmpty());  // the old model's report is gone at once
    QVERIFY(std::isnan(w.serving_view()->cell(QStringLiteral("ttft"), QStringLiteral("p99"))));
    QVERIFY(w.serving_view()->running());
    QVERIFY(done.wait(120000));
    const Scenario s = gui::read_serving_document(serving_doc, {});
    const io::CostModels costs(s.system, nullptr);
    const std::vector<ServingResult> runs = simulate_serving_runs(s, costs.get(), gui::kDefaultSeed, true);
    QCOMPARE(w.current_report().toStdString(), io::dump(io::serving_report(s, runs)));
    QVERIFY(w.current_report() != before);

    // And the other way round: an edit behind the Training tab re-evaluates training.
    field<QSpinBox>(w, "/system/num_gpus")->setValue(field<QSpinBox>(w, "/system/num_gpus")->value() / 2);
    w.panel()->set_kind(gui::ScenarioKind::training);
    QCOMPARE(json::parse(w.current_report().toStdString()),
             cli_train_report(w.panel()->document(gui::ScenarioKind::training)));
  }

  /// Cancel stops the latency-vs-QPS run and the serving run themselves: the worker threads
  /// end within a short time, the view says cancelled, and no late result shows.
  void cancel_stops_serving_and_qps_runs() {
    gui::MainWindow w;
    // 20,000 requests a run: the search and the run take many seconds, one run a fraction.
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(20000);
    // Cancel takes effect inside a simulated run (every thousand or so events): the
    // workers end long before one run would have (a sanitized build, on a loaded machine,
    // runs several times slower; the bound scales with one run measured here).
    QElapsedTimer one;
    one.start();
    {
      const Scenario s = gui::read_serving_document(w.panel()->document(gui::ScenarioKind::inference), {});
      const io::CostModels costs(s.system, nullptr);
      simulate_serving(s, costs.get(), gui::kDefaultSeed);
    }
    const int limit_ms = static_cast<int>(std::max<qint64>(5000, 4 * one.elapsed()));
    QSignalSpy qps(&w, &gui::MainWindow::qps_finished);
    QSignalSpy served(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);  // starts a serving run
    w.run_qps_now();
    QVERIFY(w.serving_view()->qps_running());
    QTest::qWait(300);  // into the search
    QVERIFY(w.serving_view()->qps_running());
    QVERIFY(w.serving_view()->running());
    w.serving_view()->click_qps_cancel();
    w.cancel_serving();
    QVERIFY(!w.serving_view()->qps_running());
    QVERIFY(!w.serving_view()->running());
    QVERIFY2(w.serving_view()->qps_status().contains(QStringLiteral("cancelled")), qPrintable(w.serving_view()->qps_status()));
    QVERIFY2(w.serving_view()->status().contains(QStringLiteral("ancelled")), qPrintable(w.serving_view()->status()));
    QElapsedTimer t;
    t.start();
    QVERIFY2(QThreadPool::globalInstance()->waitForDone(limit_ms), qPrintable(QStringLiteral("%1 ms").arg(limit_ms)));  // the work itself stopped
    qInfo("workers ended %lld ms after the cancel", static_cast<long long>(t.elapsed()));
    QTest::qWait(200);  // the finished watchers are delivered, and dropped
    QCOMPARE(qps.count(), 0);
    QCOMPARE(served.count(), 0);
    QVERIFY(w.serving_view()->qps_points(QStringLiteral("TTFT p99")).empty());
    QVERIFY(w.current_report().isEmpty());
    // A run after the cancel finishes normally.
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(30);
    QVERIFY(served.wait(120000));
    QVERIFY(w.current_report().contains(QStringLiteral("\"requests\": 30")));
  }

  void invalid_serving_input_shows_its_error() {
    gui::MainWindow w;
    w.panel()->set_kind(gui::ScenarioKind::inference);
    field<QSpinBox>(w, "/inference/tp")->setValue(16);  // more than the 8 GPUs
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("/system/num_gpus")), qPrintable(w.panel()->issue_text()));
    QVERIFY(!w.serving_view()->running());
    QVERIFY(w.current_report().isEmpty());
  }

  /// The capsim command on the same file prints the bytes the window exports.
  void reports_equal_the_cli_output() {
    auto cli = [](const QStringList& args) {
      QProcess p;
      p.start(QStringLiteral(CAPSIM_CLI), args);
      if (!p.waitForFinished(120000) || p.exitCode() != 0)
        qFatal("capsim failed: %s", p.readAllStandardError().constData());
      return QString::fromUtf8(p.readAllStandardOutput());
    };
    gui::MainWindow w;
    const QString example = QStringLiteral(CAPSIM_SOURCE_DIR "/examples/llama3-8b-h100.json");
    QVERIFY(w.open_file(example));
    QCOMPARE(w.current_report(),
             cli({QStringLiteral("train"), example, QStringLiteral("--format"), QStringLiteral("json")}));

    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("serving.json"));
    w.panel()->set_kind(gui::ScenarioKind::inference);
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(40);
    field<QComboBox>(w, "/inference/engine/name")->setCurrentText(QStringLiteral("sglang"));
    QVERIFY(w.save_file(path));
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    QVERIFY(w.open_file(path));
    QVERIFY(done.wait(120000));
    QVERIFY(w.current_report().contains(QStringLiteral("sglang")));
    QCOMPARE(w.current_report(),
             cli({QStringLiteral("infer"), path, QStringLiteral("--format"), QStringLiteral("json")}));
  }

  /// Each training field writes its own key as `--set` does, and the window's report is
  /// the CLI's for the document; the command itself prints the same bytes for the file.
  void training_fields_write_the_clis_keys() {
    gui::MainWindow w;
    json expected = w.panel()->document(gui::ScenarioKind::training);
    auto check = [&](const char* set) {
      io::apply_overrides(expected, {set});
      QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected);
      QVERIFY2(w.panel()->issue_text().isEmpty(), qPrintable(w.panel()->issue_text()));
      QCOMPARE(w.current_report().toStdString(), io::dump(cli_train_report(expected)));
    };
    field<QSpinBox>(w, "/training/etp")->setValue(0);
    check("training.etp=\"auto\"");
    field<QSpinBox>(w, "/training/etp")->setValue(1);
    check("training.etp=1");
    field<QComboBox>(w, "/training/schedule")->setCurrentText(QStringLiteral("gpipe"));
    check("training.schedule=gpipe");
    field<QComboBox>(w, "/training/framework")->setCurrentText(QStringLiteral("pytorch"));
    check("training.framework=pytorch");
    field<QComboBox>(w, "/training/attention")->setCurrentText(QStringLiteral("flash2"));
    check("training.attention=flash2");
    field<QComboBox>(w, "/training/optimizer")->setCurrentText(QStringLiteral("sgd"));
    check("training.optimizer=sgd");
    field<QComboBox>(w, "/training/optimizer_moments")->setCurrentText(QStringLiteral("bf16"));
    check("training.optimizer_moments=bf16");
    field<QComboBox>(w, "/training/grad_reduce_dtype")->setCurrentText(QStringLiteral("bf16"));
    check("training.grad_reduce_dtype=bf16");
    field<QComboBox>(w, "/training/attention")->setCurrentText(QStringLiteral("cudnn"));
    check("training.attention=cudnn");
    field<QComboBox>(w, "/training/mode")->setCurrentText(QStringLiteral("sft"));
    check("training.mode=sft");
    field<QCheckBox>(w, "/training/offload_optimizer")->setChecked(true);
    check("training.offload_optimizer=true");
    field<QCheckBox>(w, "/training/overlap_dp")->setChecked(false);
    check("training.overlap_dp=false");
    field<QDoubleSpinBox>(w, "/training/tp_comm_overlap")->setValue(0.5);
    check("training.tp_comm_overlap=0.5");
    field<QDoubleSpinBox>(w, "/training/moe_imbalance")->setValue(1.5);
    check("training.moe_imbalance=1.5");
    field<QComboBox>(w, "/training/moe_dispatcher")->setCurrentText(QStringLiteral("hierarchical"));
    check("training.moe_dispatcher=hierarchical");
    field<QComboBox>(w, "/training/ep_overlap")->setCurrentText(QStringLiteral("off"));
    check("training.ep_overlap=false");
    field<QComboBox>(w, "/training/precision")->setCurrentText(QStringLiteral("fp8"));
    check("training.precision=fp8");
    field<QComboBox>(w, "/training/fp8_param_gather")->setCurrentText(QStringLiteral("off"));
    check("training.fp8_param_gather=false");
    field<QComboBox>(w, "/training/fp8_recipe")->setCurrentText(QStringLiteral("blockwise"));
    check("training.fp8_recipe=blockwise");
    // The command line on the saved file prints the window's bytes.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("fields.json"));
    QVERIFY(w.save_file(path));
    const CliRun cli = run_cli({QStringLiteral("train"), path, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(cli.code, 0);
    QCOMPARE(cli.out, w.current_report());
    // Reopened, the file fills the same fields; an edit changes only its own key.
    gui::MainWindow again;
    QVERIFY(again.open_file(path));
    QCOMPARE(again.panel()->document(gui::ScenarioKind::training), expected);
    QCOMPARE(again.current_report(), w.current_report());
    for (const char* shown : {"/training/schedule", "/training/framework", "/training/attention", "/training/optimizer",
                              "/training/optimizer_moments", "/training/mode", "/training/fp8_recipe",
                              "/training/tp_comm_overlap", "/training/offload_optimizer", "/training/etp"})
      QCOMPARE(again.panel()->shown_text(QString::fromUtf8(shown)), w.panel()->shown_text(QString::fromUtf8(shown)));
    field<QSpinBox>(again, "/training/pp")->setValue(2);
    io::apply_overrides(expected, {"training.pp=2"});
    QCOMPARE(again.panel()->document(gui::ScenarioKind::training), expected);
  }

  /// The documents field packs sequences: a value writes training.document_tokens as `--set`
  /// does and the report is the CLI's (it names the documents); back at "whole sequence" the
  /// key is gone again.
  void document_field_packs_sequences() {
    gui::MainWindow w;
    json expected = w.panel()->document(gui::ScenarioKind::training);
    auto* docs = field<QSpinBox>(w, "/training/document_tokens");
    QCOMPARE(docs->text(), QStringLiteral("whole sequence"));
    docs->setValue(1024);
    io::apply_overrides(expected, {"training.document_tokens=1024"});
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected);
    QVERIFY2(w.panel()->issue_text().isEmpty(), qPrintable(w.panel()->issue_text()));
    QCOMPARE(w.current_report().toStdString(), io::dump(cli_train_report(expected)));
    QVERIFY(w.current_report().contains(QStringLiteral("\"document_tokens\": 1024")));
    docs->setValue(0);
    expected["training"].erase("document_tokens");
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected);
  }

  /// The loss field writes training.loss as --set does; on the PyTorch stack the report
  /// says which loss ran.
  void loss_field_compiles_the_pytorch_loss() {
    gui::MainWindow w;
    json expected = w.panel()->document(gui::ScenarioKind::training);
    auto* loss = field<QComboBox>(w, "/training/loss");
    // Auto shows what it resolved to: the Megatron stack's own fused loss.
    QCOMPARE(loss->currentText(), QStringLiteral("auto \u2192 fused"));
    field<QComboBox>(w, "/training/framework")->setCurrentText(QStringLiteral("pytorch"));
    loss->setCurrentText(QStringLiteral("compiled"));
    io::apply_overrides(expected, {"training.framework=pytorch", "training.loss=compiled"});
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected);
    QVERIFY2(w.panel()->issue_text().isEmpty(), qPrintable(w.panel()->issue_text()));
    QCOMPARE(w.current_report().toStdString(), io::dump(cli_train_report(expected)));
    QVERIFY(w.current_report().contains(QStringLiteral("\"loss\": \"compiled\"")));
    loss->setCurrentIndex(0);
    QCOMPARE(loss->currentText(), QStringLiteral("auto \u2192 eager"));
    expected["training"].erase("loss");
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected);
  }

  /// The adapter fields make LoRA and QLoRA scenarios: each writes training.lora's key as
  /// `--set` does, the report is the CLI's, and a saved file reopens to the same fields.
  void lora_fields_write_the_clis_keys() {
    gui::MainWindow w;
    json expected = w.panel()->document(gui::ScenarioKind::training);
    auto* rank = field<QSpinBox>(w, "/training/lora/rank");
    QVERIFY(!rank->isEnabled());  // pretrain: no adapters
    field<QComboBox>(w, "/training/mode")->setCurrentText(QStringLiteral("qlora"));
    io::apply_overrides(expected, {"training.mode=qlora"});
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected);
    QVERIFY(rank->isEnabled());
    // No block yet: the command line's message.
    QVERIFY(w.current_report().isEmpty());
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("/training/lora")), qPrintable(w.panel()->issue_text()));
    auto check = [&](const std::vector<std::string>& sets) {
      io::apply_overrides(expected, sets);
      QCOMPARE(w.panel()->document(gui::ScenarioKind::training), expected);
      QVERIFY2(w.panel()->issue_text().isEmpty(), qPrintable(w.panel()->issue_text()));
      QCOMPARE(w.current_report().toStdString(), io::dump(cli_train_report(expected)));
    };
    rank->setValue(64);
    check({"training.lora.rank=64"});
    field<QDoubleSpinBox>(w, "/training/lora/alpha")->setValue(128);
    check({"training.lora.alpha=128"});
    auto* targets = field<QLineEdit>(w, "/training/lora/targets");
    targets->setText(QStringLiteral("q_proj, v_proj down_proj"));
    emit targets->editingFinished();
    check({"training.lora.targets=[\"q_proj\",\"v_proj\",\"down_proj\"]"});
    field<QComboBox>(w, "/training/lora/base_dtype")->setCurrentText(QStringLiteral("nf4"));
    check({"training.lora.base_dtype=nf4"});
    field<QCheckBox>(w, "/training/lora/double_quant")->setChecked(true);
    check({"training.lora.double_quant=true"});
    field<QDoubleSpinBox>(w, "/training/lora/dropout")->setValue(0.1);
    check({"training.lora.dropout=0.1"});
    // NF4 stores the base in about a quarter of bf16's bytes: the weights shrink.
    const json nf4 = json::parse(w.current_report().toStdString());
    field<QComboBox>(w, "/training/lora/base_dtype")->setCurrentText(QStringLiteral("bf16"));
    check({"training.lora.base_dtype=bf16"});
    const json bf16 = json::parse(w.current_report().toStdString());
    QVERIFY(nf4["memory"]["stages"][0]["weights_bytes"].get<double>() <
            bf16["memory"]["stages"][0]["weights_bytes"].get<double>() / 2);
    // A name the reader does not know: its message, on the field.
    targets->setText(QStringLiteral("q_prj"));
    emit targets->editingFinished();
    QVERIFY(w.current_report().isEmpty());
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("did you mean \"q_proj\"")),
             qPrintable(w.panel()->issue_text()));
    targets->setText(QStringLiteral("auto"));
    emit targets->editingFinished();
    check({"training.lora.targets=auto"});
    // Saved and reopened: the same document, fields and report, which the CLI prints too.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("qlora.json"));
    QVERIFY(w.save_file(path));
    const CliRun cli = run_cli({QStringLiteral("train"), path, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(cli.code, 0);
    QCOMPARE(cli.out, w.current_report());
    gui::MainWindow again;
    QVERIFY(again.open_file(path));
    QCOMPARE(again.panel()->document(gui::ScenarioKind::training), expected);
    QCOMPARE(again.current_report(), w.current_report());
    for (const char* shown : {"/training/lora/rank", "/training/lora/alpha", "/training/lora/base_dtype", "/training/lora/dropout"})
      QCOMPARE(again.panel()->shown_text(QString::fromUtf8(shown)), w.panel()->shown_text(QString::fromUtf8(shown)));
    QCOMPARE(field<QLineEdit>(again, "/training/lora/targets")->text(), QStringLiteral("auto"));
  }

  /// A value the reader rejects shows the command line's message, word for word, and no report.
  void invalid_training_fields_show_the_clis_message() {
    gui::MainWindow w;
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("bad.json"));
    auto expect_cli_error = [&] {
      QVERIFY(w.current_report().isEmpty());
      QVERIFY(w.save_file(path));
      const CliRun cli = run_cli({QStringLiteral("train"), path, QStringLiteral("--format"), QStringLiteral("json")});
      QCOMPARE(cli.code, 1);
      QCOMPARE(QStringLiteral("capsim: ") + w.panel()->issue_text() + QStringLiteral("\n"), cli.err);
    };
    field<QComboBox>(w, "/training/fp8_recipe")->setCurrentText(QStringLiteral("blockwise"));  // with bf16
    QVERIFY2(
        w.panel()->issue_text().contains(QStringLiteral("/training/fp8_recipe: applies only to precision \"fp8\"")),
        qPrintable(w.panel()->issue_text()));
    expect_cli_error();
    field<QComboBox>(w, "/training/fp8_recipe")->setCurrentText(QStringLiteral("auto"));
    QVERIFY(w.panel()->issue_text().isEmpty());
    field<QComboBox>(w, "/training/mode")->setCurrentText(QStringLiteral("ppo"));  // without its rl block
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("/training/rl: is required when mode is \"ppo\"")),
             qPrintable(w.panel()->issue_text()));
    expect_cli_error();
  }

  /// A field left "auto" shows what the evaluation chose: the report's layout value.
  void auto_fields_show_what_they_resolved_to() {
    gui::MainWindow w;
    field<QSpinBox>(w, "/training/micro_batch")->setValue(0);  // auto
    field<QComboBox>(w, "/training/recompute")->setCurrentText(QStringLiteral("auto"));
    const json r = json::parse(w.current_report().toStdString());
    const QString arrow = QString::fromUtf8(" \u2192 ");
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/training/micro_batch")),
             QStringLiteral("auto") + arrow + QString::number(r["layout"]["micro_batch"].get<int64_t>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/training/recompute")),
             QStringLiteral("auto") + arrow + QString::fromStdString(r["layout"]["recompute"].get<std::string>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/training/dp")),
             QStringLiteral("auto") + arrow + QString::number(r["layout"]["dp"].get<int64_t>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/training/framework")),
             QStringLiteral("auto") + arrow + QString::fromStdString(r["layout"]["framework"].get<std::string>()));
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training)["training"]["micro_batch"], json("auto"));
    // No report (a layout that cannot be): plain "auto" again.
    field<QSpinBox>(w, "/training/tp")->setValue(3);
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/training/micro_batch")), QStringLiteral("auto"));
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    QVERIFY(w.panel()->shown_text(QStringLiteral("/training/micro_batch")).startsWith(QStringLiteral("auto") + arrow));
    // Layout fields too: tp and sp left to the search over layouts.
    field<QSpinBox>(w, "/training/tp")->setValue(0);  // auto
    field<QComboBox>(w, "/training/sp")->setCurrentText(QStringLiteral("auto"));
    const json ra = json::parse(w.current_report().toStdString());
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training)["training"]["tp"], json("auto"));
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training)["training"]["sp"], json("auto"));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/training/tp")),
             QStringLiteral("auto") + arrow + QString::number(ra["layout"]["tp"].get<int64_t>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/training/sp")),
             QStringLiteral("auto") + arrow + (ra["layout"]["sp"].get<bool>() ? QStringLiteral("on") : QStringLiteral("off")));
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    field<QComboBox>(w, "/training/sp")->setCurrentText(QStringLiteral("off"));
    // The NIC rate left auto takes the GPU's reference node's (DGX H100: 400 Gb/s).
    field<QDoubleSpinBox>(w, "/system/nic_gbps_per_gpu")->setValue(-1);  // auto
    QCOMPARE(w.panel()->document(gui::ScenarioKind::training)["system"]["nic_gbps_per_gpu"], json("auto"));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/system/nic_gbps_per_gpu")), QStringLiteral("auto") + arrow + QStringLiteral("400.0"));
    field<QDoubleSpinBox>(w, "/system/nic_gbps_per_gpu")->setValue(400);

    // Serving: the engine's defaults and auto fields show the run's "resolved" values.
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(40);
    field<QSpinBox>(w, "/inference/ep")->setValue(0);
    field<QSpinBox>(w, "/inference/replicas")->setValue(0);  // auto
    field<QComboBox>(w, "/inference/kv_dtype")->setCurrentText(QStringLiteral("auto"));
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    const json sr = json::parse(w.current_report().toStdString());
    const json& resolved = sr["resolved"];
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/engine/max_num_seqs")),
             QStringLiteral("default") + arrow + QString::number(resolved["max_num_seqs"].get<int64_t>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/engine/gpu_memory_utilization")),
             QStringLiteral("default") + arrow + QString::fromStdString(resolved["gpu_memory_utilization"].dump()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/engine/chunked_prefill")),
             QStringLiteral("default") + arrow +
                 (resolved["chunked_prefill"].get<bool>() ? QStringLiteral("on") : QStringLiteral("off")));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/engine/version")),
             QStringLiteral("auto (newest)") + arrow +
                 QString::fromStdString(resolved["engine_profile"].get<std::string>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/ep")),
             QStringLiteral("auto") + arrow + QString::number(resolved["ep"].get<int64_t>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/replicas")),
             QStringLiteral("auto") + arrow + QString::number(resolved["replicas"].get<int64_t>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/kv_dtype")),
             QStringLiteral("auto") + arrow + QString::fromStdString(resolved["kv_dtype"].get<std::string>()));
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/engine/preemption")),
             QStringLiteral("default") + arrow + QString::fromStdString(sr["engine"]["preemption"].get<std::string>()));
    // An edit: the old run's choices no longer apply.
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(30);
    QCOMPARE(w.panel()->shown_text(QStringLiteral("/inference/engine/max_num_seqs")), QStringLiteral("default"));
  }

  /// Each serving field writes its own key as `--set` does; the run's report is the bytes
  /// `capsim infer` prints for the saved file.
  void serving_fields_write_the_clis_keys() {
    gui::MainWindow w;
    json expected = w.panel()->document(gui::ScenarioKind::inference);
    auto check = [&](const char* set) {
      io::apply_overrides(expected, {set});
      QVERIFY2(w.panel()->document(gui::ScenarioKind::inference) == expected,
               qPrintable(QString::fromStdString(
                   set + (" gives " + w.panel()->document(gui::ScenarioKind::inference).dump()))));
    };
    field<QSpinBox>(w, "/inference/workload/num_requests")->setValue(40);
    check("inference.workload.num_requests=40");
    field<QSpinBox>(w, "/inference/pp")->setValue(2);
    check("inference.pp=2");
    field<QSpinBox>(w, "/inference/ep")->setValue(0);
    check("inference.ep=\"auto\"");
    field<QSpinBox>(w, "/inference/replicas")->setValue(2);
    check("inference.replicas=2");
    field<QComboBox>(w, "/inference/activation_dtype")->setCurrentText(QStringLiteral("fp8"));
    check("inference.activation_dtype=fp8");
    field<QComboBox>(w, "/inference/kv_dtype")->setCurrentText(QStringLiteral("fp8"));
    check("inference.kv_dtype=fp8");
    field<QSpinBox>(w, "/inference/engine/max_num_seqs")->setValue(64);
    check("inference.engine.max_num_seqs=64");
    field<QSpinBox>(w, "/inference/engine/max_num_batched_tokens")->setValue(4096);
    check("inference.engine.max_num_batched_tokens=4096");
    field<QSpinBox>(w, "/inference/engine/block_size")->setValue(32);
    check("inference.engine.block_size=32");
    field<QDoubleSpinBox>(w, "/inference/engine/gpu_memory_utilization")->setValue(0.8);
    check("inference.engine.gpu_memory_utilization=0.8");
    field<QComboBox>(w, "/inference/engine/chunked_prefill")->setCurrentText(QStringLiteral("off"));
    check("inference.engine.chunked_prefill=false");
    field<QComboBox>(w, "/inference/engine/cuda_graphs")->setCurrentText(QStringLiteral("on"));
    check("inference.engine.cuda_graphs=true");
    field<QComboBox>(w, "/inference/engine/preemption")->setCurrentText(QStringLiteral("swap"));
    check("inference.engine.preemption=swap");
    field<QDoubleSpinBox>(w, "/inference/workload/prefix_hit_rate")->setValue(0.25);
    check("inference.workload.prefix_hit_rate=0.25");
    field<QDoubleSpinBox>(w, "/inference/slo/ttft_ms")->setValue(300);
    check("inference.slo.ttft_ms=300.0");
    field<QDoubleSpinBox>(w, "/inference/slo/tpot_ms")->setValue(20);
    check("inference.slo.tpot_ms=20.0");
    field<QComboBox>(w, "/inference/workload/mode")->setCurrentText(QStringLiteral("concurrency"));
    field<QSpinBox>(w, "/inference/workload/concurrency")->setValue(16);
    io::apply_overrides(expected, {"inference.workload.mode=concurrency"});
    check("inference.workload.concurrency=16");
    field<QComboBox>(w, "/inference/workload/output_tokens/dist")->setCurrentText(QStringLiteral("sharegpt"));
    check("inference.workload.output_tokens={\"mean\": 128, \"dist\": \"sharegpt\"}");
    field<QComboBox>(w, "/inference/workload/input_tokens/dist")->setCurrentText(QStringLiteral("uniform"));
    check("inference.workload.input_tokens={\"mean\": 512, \"dist\": \"uniform\", \"min\": 1, \"max\": 1023}");
    QVERIFY(field<QSpinBox>(w, "/inference/workload/input_tokens/min")->isEnabled());
    QVERIFY(!field<QSpinBox>(w, "/inference/workload/output_tokens/min")->isEnabled());
    field<QSpinBox>(w, "/inference/workload/input_tokens/min")->setValue(256);
    check("inference.workload.input_tokens.min=256");
    // Back to the engine's default: the key leaves the document.
    field<QSpinBox>(w, "/inference/engine/block_size")->setValue(0);
    expected["inference"]["engine"].erase("block_size");
    QCOMPARE(w.panel()->document(gui::ScenarioKind::inference), expected);
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    QVERIFY2(w.panel()->issue_text().isEmpty(), qPrintable(w.panel()->issue_text()));
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("serving-fields.json"));
    QVERIFY(w.save_file(path));
    const CliRun cli = run_cli({QStringLiteral("infer"), path, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(cli.code, 0);
    QCOMPARE(w.current_report(), cli.out);
    const json r = json::parse(cli.out.toStdString());
    QCOMPARE(r["layout"]["replicas"].get<int64_t>(), int64_t{2});
    // Reopened, the file fills the same fields and gives the same report.
    gui::MainWindow again;
    QSignalSpy again_done(&again, &gui::MainWindow::serving_finished);
    QVERIFY(again.open_file(path));
    QCOMPARE(again.panel()->document(gui::ScenarioKind::inference), expected);
    QVERIFY(again_done.wait(120000));
    QCOMPARE(again.current_report(), w.current_report());
    for (const char* shown : {"/inference/kv_dtype", "/inference/engine/max_num_seqs", "/inference/engine/preemption",
                              "/inference/engine/chunked_prefill", "/inference/workload/input_tokens/min",
                              "/inference/slo/ttft_ms", "/inference/workload/output_tokens/dist"})
      QCOMPARE(again.panel()->shown_text(QString::fromUtf8(shown)), w.panel()->shown_text(QString::fromUtf8(shown)));
  }

  /// A trace workload: the file's absolute path goes into the scenario and the report is
  /// `capsim infer`'s; a trace that does not read shows the command line's message.
  void trace_workload_replays_the_file() {
    gui::MainWindow w;
    const QString trace = QStringLiteral(CAPSIM_SOURCE_DIR "/tests/scenarios/trace.csv");
    field<QComboBox>(w, "/inference/workload/mode")->setCurrentText(QStringLiteral("trace"));
    QVERIFY(w.panel()->findChild<QPushButton*>(QStringLiteral("open_trace_file"))->isEnabled());
    w.panel()->set_trace_file(trace);
    const json& doc = w.panel()->document(gui::ScenarioKind::inference);
    QCOMPARE(doc["inference"]["workload"]["trace_file"], json(QFileInfo(trace).absoluteFilePath().toStdString()));
    QCOMPARE(w.panel()->findChild<QLabel*>(QStringLiteral("trace_file"))->text(), QStringLiteral("trace.csv"));
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("trace-scenario.json"));
    QVERIFY(w.save_file(path));
    const CliRun cli = run_cli({QStringLiteral("infer"), path, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(cli.code, 0);
    QCOMPARE(w.current_report(), cli.out);
    // A trace whose arrivals go back in time.
    const QString bad = dir.filePath(QStringLiteral("bad.csv"));
    {
      QFile f(bad);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("arrival_s,input_tokens,output_tokens\n1.0,100,10\n0.5,100,10\n");
    }
    w.panel()->set_trace_file(bad);
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("arrivals must not decrease")),
             qPrintable(w.panel()->issue_text()));
    QVERIFY(w.current_report().isEmpty());
    QVERIFY(w.save_file(path));
    const CliRun failed = run_cli({QStringLiteral("infer"), path});
    QCOMPARE(failed.code, 1);
    QCOMPARE(QStringLiteral("capsim: ") + w.panel()->issue_text() + QStringLiteral("\n"), failed.err);
  }

  /// A file with the wrong types where objects and numbers belong: the editor opens it, lists
  /// the reader's problems, and an edit writes its key without crashing.
  void hostile_scenario_file_does_not_crash_the_editor() {
    gui::MainWindow w;
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("hostile.json"));
    {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"kind": "inference", "model": "llama3-8b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
                  "inference": {"tp": "two", "engine": 5, "slo": [], "pp": 1e300, "replicas": -1e30,
                                "workload": {"mode": "poisson", "qps": 1, "num_requests": 10,
                                             "input_tokens": {"mean": "big", "dist": 7}, "output_tokens": 64}}})");
    }
    QVERIFY(w.open_file(path));
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("/inference/tp")), qPrintable(w.panel()->issue_text()));
    field<QSpinBox>(w, "/inference/engine/max_num_seqs")->setValue(32);
    field<QDoubleSpinBox>(w, "/inference/slo/ttft_ms")->setValue(100);
    field<QComboBox>(w, "/inference/workload/output_tokens/dist")->setCurrentText(QStringLiteral("uniform"));
    field<QSpinBox>(w, "/inference/workload/output_tokens/max")->setValue(100);
    field<QSpinBox>(w, "/inference/tp")->setValue(1);
    const json& doc = w.panel()->document(gui::ScenarioKind::inference);
    QCOMPARE(doc["inference"]["engine"], json({{"max_num_seqs", 32}}));
    QCOMPARE(doc["inference"]["slo"], json({{"ttft_ms", 100.0}}));
    QCOMPARE(doc["inference"]["workload"]["output_tokens"],
             json({{"mean", 64}, {"dist", "uniform"}, {"min", 1}, {"max", 100}}));
    // What is still wrong (the input length) is listed as the command line lists it.
    QVERIFY(w.save_file(path));
    const CliRun cli = run_cli({QStringLiteral("infer"), path, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(cli.code, 1);
    QCOMPARE(QStringLiteral("capsim: ") + w.panel()->issue_text() + QStringLiteral("\n"), cli.err);
  }

  /// FP8 activations on a GPU without FP8 tensor cores: the CLI's message, inline.
  void invalid_serving_fields_show_the_clis_message() {
    gui::MainWindow w;
    w.panel()->set_kind(gui::ScenarioKind::inference);
    field<QComboBox>(w, "/system/gpu")->setCurrentText(QStringLiteral("a100-sxm4-80gb"));
    field<QComboBox>(w, "/inference/activation_dtype")->setCurrentText(QStringLiteral("fp8"));
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("/inference/activation_dtype: needs FP8 tensor cores")),
             qPrintable(w.panel()->issue_text()));
    QVERIFY(w.current_report().isEmpty());
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("bad-serving.json"));
    QVERIFY(w.save_file(path));
    const CliRun cli = run_cli({QStringLiteral("infer"), path, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(cli.code, 1);
    QCOMPARE(QStringLiteral("capsim: ") + w.panel()->issue_text() + QStringLiteral("\n"), cli.err);
  }

  /// Open HF config: the scenario names the file, the parameter count is the reader's, the
  /// report is the CLI's; a config that does not read shows the CLI's message.
  void hf_config_becomes_the_model() {
    QTemporaryDir dir;
    QDir().mkpath(dir.filePath(QStringLiteral("tiny")));
    const QString config = dir.filePath(QStringLiteral("tiny/config.json"));
    {
      QFile f(config);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
                  "num_hidden_layers": 12, "intermediate_size": 5632, "vocab_size": 32000, "architectures": ["X"]})");
    }
    gui::MainWindow w;
    QVERIFY(w.panel()->open_hf_config(config));
    const json& doc = w.panel()->document(gui::ScenarioKind::training);
    QCOMPARE(doc["model"], json(QFileInfo(config).absoluteFilePath().toStdString()));
    QCOMPARE(w.panel()->document(gui::ScenarioKind::inference)["model"], doc["model"]);
    const ParamCounts p = count_params(io::load_model(config.toStdString()));
    const QString info = w.panel()->findChild<QLabel*>(QStringLiteral("model_info"))->text();
    QVERIFY2(info.startsWith(QStringLiteral("%1 B parameters").arg(static_cast<double>(p.total) / 1e9, 0, 'f', 2)),
             qPrintable(info));
    const CliRun model = run_cli({QStringLiteral("model"), config, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(json::parse(model.out.toStdString())["params_total"].get<int64_t>(), p.total);
    const QString path = dir.filePath(QStringLiteral("hf.json"));
    QVERIFY(w.save_file(path));
    const CliRun train = run_cli({QStringLiteral("train"), path, QStringLiteral("--format"), QStringLiteral("json")});
    QCOMPARE(train.code, 0);
    QCOMPARE(train.out, w.current_report());
    // A config of an unknown family: the reader's message, as `capsim train` prints it.
    const QString bad = dir.filePath(QStringLiteral("bad-config.json"));
    {
      QFile f(bad);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"model_type": "no-such-family", "hidden_size": 64})");
    }
    QVERIFY(!w.panel()->open_hf_config(bad));
    QVERIFY2(w.panel()->issue_text().contains(QStringLiteral("unsupported model family")),
             qPrintable(w.panel()->issue_text()));
    QVERIFY(w.current_report().isEmpty());
    QVERIFY(w.save_file(path));
    const CliRun failed = run_cli({QStringLiteral("train"), path});
    QCOMPARE(failed.code, 1);
    QCOMPARE(QStringLiteral("capsim: ") + w.panel()->issue_text() + QStringLiteral("\n"), failed.err);
    // A preset again: the report follows.
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("llama3-8b"));
    QVERIFY(w.panel()->issue_text().isEmpty());
    QVERIFY(!w.current_report().isEmpty());
  }

  /// Cancel stops the search's workers (search_training's cancel flag): the pool is idle
  /// within a bounded time and no result shows; the next search runs to the end.
  void cancel_stops_the_search() {
    gui::MainWindow w;
    // DeepSeek-V3 over ten GPU counts: about a million layouts.
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("deepseek-v3"));
    field<QSpinBox>(w, "/training/global_batch")->setValue(4096);
    field<QSpinBox>(w, "/training/seq_len")->setValue(4096);
    w.search_view()->set_gpu_counts(QStringLiteral("64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768"));
    QSignalSpy done(&w, &gui::MainWindow::search_finished);
    QSignalSpy progressed(&w, &gui::MainWindow::search_progressed);
    w.run_search_now();
    QVERIFY(w.search_view()->running());
    // Progress: the layouts costed of those enumerated, on the bar and the status line.
    QVERIFY(progressed.wait(30000));
    QTRY_VERIFY_WITH_TIMEOUT(progressed.constLast().at(1).toLongLong() > 0 && progressed.constLast().at(0).toLongLong() > 0, 60000);
    QVERIFY(w.search_view()->progress() >= 0 && w.search_view()->progress() <= 1);
    QVERIFY2(w.search_view()->status().contains(QStringLiteral("layouts costed")), qPrintable(w.search_view()->status()));
    w.cancel_search();
    QCOMPARE(w.search_view()->progress(), -1.0);
    QVERIFY(!w.search_view()->running());
    QElapsedTimer t;
    t.start();
    QVERIFY(QThreadPool::globalInstance()->waitForDone(2000));  // the work itself stopped
    qInfo("search workers ended %lld ms after the cancel", static_cast<long long>(t.elapsed()));
    QTest::qWait(100);
    QCOMPARE(done.count(), 0);
    QCOMPARE(w.search_view()->rows(), 0);
    // The next search (a small one) runs to the end.
    w.search_view()->set_gpu_counts(QStringLiteral("1024"));
    w.run_search_now();
    QVERIFY(done.wait(240000));
    QVERIFY(w.search_view()->rows() > 0);
  }

  /// The table and scatter are search_training's top layouts; a clicked row becomes the
  /// training scenario, which then reports what the search costed.
  void search_lists_the_librarys_layouts_and_loads_one() {
    gui::MainWindow w;
    const json doc = w.panel()->document(gui::ScenarioKind::training);
    const Scenario s = io::scenario_from_json(doc);
    const io::CostModels costs(s.system, nullptr);
    const SearchResult r = search_training(s, costs.get(), gui::search_options({8, 16}, 6));
    QVERIFY(r.top.size() >= 2);
    w.search_view()->set_gpu_counts(QStringLiteral("8, 16"));
    QSignalSpy done(&w, &gui::MainWindow::search_finished);
    w.run_search_now();
    QVERIFY(w.search_view()->running());
    w.cancel_search();  // dropped: nothing shows
    QVERIFY(!w.search_view()->running());
    QVERIFY(!done.wait(1500));
    QCOMPARE(w.search_view()->rows(), 0);
    for (auto* top : w.search_view()->findChildren<QSpinBox*>(QStringLiteral("search_top"))) top->setValue(6);
    w.run_search_now();
    QVERIFY(done.wait(120000));
    QCOMPARE(w.search_view()->rows(), static_cast<int>(r.top.size()));
    std::vector<QPointF> expected;
    for (size_t i = 0; i < r.top.size(); ++i) {
      const int row = static_cast<int>(i);
      QCOMPARE(w.search_view()->candidate(row), r.top[i]);
      QCOMPARE(w.search_view()->cell(row, QStringLiteral("GPUs")).toLongLong(), static_cast<qlonglong>(r.top[i].num_gpus));
      QCOMPARE(w.search_view()->cell(row, QStringLiteral("tp")).toLongLong(), static_cast<qlonglong>(r.top[i].plan.tp));
      QCOMPARE(w.search_view()->cell(row, QStringLiteral("step s")), QString::number(r.top[i].step_s, 'f', 3));
      expected.emplace_back(static_cast<double>(r.top[i].num_gpus), r.top[i].tokens_per_s);
    }
    QCOMPARE(w.search_view()->points(), expected);
    // The Pareto front on (GPUs, tokens/s): the plotted layouts no other beats on both axes.
    std::vector<SearchCandidate> plotted = r.top;
    for (const SearchCandidate& c : r.pareto)
      if (std::find(plotted.begin(), plotted.end(), c) == plotted.end()) plotted.push_back(c);
    auto front_of = [&](auto x_of) {
      std::vector<QPointF> front;
      for (const SearchCandidate& a : plotted) {
        bool beaten = false;
        for (const SearchCandidate& b : plotted)
          beaten = beaten || (x_of(b) <= x_of(a) && b.tokens_per_s >= a.tokens_per_s &&
                              (x_of(b) < x_of(a) || b.tokens_per_s > a.tokens_per_s));
        if (!beaten) front.emplace_back(x_of(a), a.tokens_per_s);
      }
      std::stable_sort(front.begin(), front.end(), [](const QPointF& p, const QPointF& q) { return p.x() < q.x(); });
      return front;
    };
    const std::vector<QPointF> by_gpus =
        front_of([](const SearchCandidate& c) { return static_cast<double>(c.num_gpus); });
    QVERIFY(!by_gpus.empty());
    QCOMPARE(w.search_view()->pareto_points(), by_gpus);
    // Against cost: $ per million tokens at data/prices.json's price for the GPU.
    const double price =
        io::read_json_file(io::data_dir() / "prices.json")["prices"][s.system.gpu.id]["usd_per_gpu_hour"].get<double>();
    auto cost = [&](const SearchCandidate& c) {
      return static_cast<double>(c.num_gpus) * price / 3600.0 / c.tokens_per_s * 1e6;
    };
    w.search_view()->set_x_axis(QStringLiteral("cost"));
    QCOMPARE(w.search_view()->price(), price);
    std::vector<QPointF> by_cost_points;
    for (const SearchCandidate& c : r.top) by_cost_points.emplace_back(cost(c), c.tokens_per_s);
    QCOMPARE(w.search_view()->points(), by_cost_points);
    QCOMPARE(w.search_view()->pareto_points(), front_of(cost));
    // A click on a point loads its layout.
    {
      // The layout at that point (layouts of the same throughput and GPUs share a point).
      const SearchCandidate& c = r.top.back();
      QVERIFY(w.search_view()->click_point(QPointF(cost(c), c.tokens_per_s)));
      const json loaded = w.panel()->document(gui::ScenarioKind::training);
      QVERIFY(std::any_of(r.top.begin(), r.top.end(), [&](const SearchCandidate& o) {
        return cost(o) == cost(c) && o.tokens_per_s == c.tokens_per_s && loaded == gui::apply_candidate(doc, o);
      }));
      w.panel()->load_document(doc);
      w.views()->setCurrentWidget(w.search_view());
    }
    w.search_view()->set_x_axis(QStringLiteral("gpus"));
    QCOMPARE(w.search_view()->points(), expected);
    // Sorted by throughput, the first row is the fastest in tokens/s.
    w.search_view()->sort_by(QStringLiteral("tokens/s"), Qt::DescendingOrder);
    double best = 0;
    for (const auto& c : r.top) best = std::max(best, c.tokens_per_s);
    QCOMPARE(w.search_view()->candidate(0).tokens_per_s, best);
    // A click loads the layout: the training report is the CLI's for that layout.
    const SearchCandidate c = w.search_view()->candidate(1);
    w.search_view()->click_row(1);
    QCOMPARE(w.views()->currentIndex(), 0);
    QCOMPARE(w.panel()->kind(), gui::ScenarioKind::training);
    const json loaded = w.panel()->document(gui::ScenarioKind::training);
    QCOMPARE(loaded, gui::apply_candidate(doc, c));
    QCOMPARE(loaded["system"]["num_gpus"].get<int64_t>(), c.num_gpus);
    QCOMPARE(field<QSpinBox>(w, "/training/tp")->value(), static_cast<int>(c.plan.tp));
    QCOMPARE(field<QSpinBox>(w, "/system/num_gpus")->value(), static_cast<int>(c.num_gpus));
    const json report = cli_train_report(loaded);
    QCOMPARE(w.current_report().toStdString(), io::dump(report));
    QVERIFY(std::abs(report["time"]["step_s"].get<double>() - c.step_s) <= 1e-9 * c.step_s);
  }

  /// The timeline draws des_step's compute tasks at their simulated times, zooms with the
  /// wheel and exports the trace `capsim train --engine des --trace` writes.
  void timeline_draws_the_des_run_and_exports_its_trace() {
    gui::MainWindow w;
    field<QSpinBox>(w, "/training/pp")->setValue(4);
    const json doc = w.panel()->document(gui::ScenarioKind::training);
    const Scenario s = io::scenario_from_json(doc);
    const io::CostModels costs(s.system, nullptr);
    const TrainEvaluation ev = evaluate_training(s, &costs.get());
    const StepOptions opt = plan_step_options(ev.plan);
    const DesStep d = des_step(s.model, s.system, ev.plan, costs.get(), opt);

    QSignalSpy done(&w, &gui::MainWindow::timeline_finished);
    w.views()->setCurrentWidget(w.timeline_view());  // runs the stale timeline
    QVERIFY(w.timeline_view()->running());
    QVERIFY(done.wait(120000));
    // One row per stage and stream: compute first, then the communication streams with tasks.
    std::map<std::pair<int32_t, int>, int> rows;
    for (const des::Task& t : d.sim.tasks()) {
      const des::Stream& st = d.sim.streams()[static_cast<size_t>(t.stream)];
      rows.emplace(std::pair{st.rank, static_cast<int>(st.kind)}, 0);
    }
    QStringList labels;
    bool comm_rows = false;
    for (auto& [key, r] : rows) {
      r = static_cast<int>(labels.size());
      labels << QStringLiteral("stage %1 %2")
                    .arg(key.first)
                    .arg(QString::fromUtf8(des::to_string(static_cast<des::StreamKind>(key.second)).data()));
      comm_rows = comm_rows || key.second != static_cast<int>(des::StreamKind::compute);
    }
    QVERIFY(comm_rows);  // pp 4: the send/recv streams have rows of their own
    QCOMPARE(w.timeline_view()->row_labels(), labels);
    QCOMPARE(labels.front(), QStringLiteral("stage 0 compute"));
    const std::vector<gui::TimelineBox> boxes = w.timeline_view()->boxes();
    QCOMPARE(boxes.size(), d.sim.tasks().size());
    size_t compute = 0;
    double last_end = 0;
    for (size_t i = 0; i < d.sim.tasks().size(); ++i) {
      const des::Stream& st = d.sim.streams()[static_cast<size_t>(d.sim.tasks()[i].stream)];
      const gui::TimelineBox& b = boxes[i];
      QCOMPARE(b.task, static_cast<int>(i));
      QCOMPARE(b.start_s, d.result.times[i].start);
      QCOMPARE(b.end_s, d.result.times[i].end);
      QCOMPARE(b.row, rows.at(std::pair{st.rank, static_cast<int>(st.kind)}));
      if (st.kind == des::StreamKind::compute) ++compute;
      last_end = std::max(last_end, b.end_s);
    }
    QVERIFY(compute > 0 && last_end <= d.result.makespan);
    QVERIFY(w.timeline_view()->status().contains(QString::number(d.step.step_s, 'f', 4)));
    // Hover: the tooltip names the task under the pointer, on a compute row and a communication row.
    for (bool comm : {false, true}) {
      const auto it = std::find_if(boxes.begin() + static_cast<std::ptrdiff_t>(boxes.size() / 2), boxes.end(),
                                   [&](const gui::TimelineBox& x) {
                                     return labels[x.row].endsWith(QStringLiteral(" compute")) != comm &&
                                            x.end_s > x.start_s;
                                   });
      QVERIFY(it != boxes.end());
      const gui::TimelineBox& b = *it;
      const QString tip = w.timeline_view()->tooltip_at(
          QPointF(w.timeline_view()->scene_x((b.start_s + b.end_s) / 2), w.timeline_view()->scene_y(b.row)));
      QCOMPARE(tip, b.tooltip);
      QVERIFY(tip.contains(labels[b.row]));
      QVERIFY(
          tip.contains(QString::fromUtf8(des::to_string(d.sim.tasks()[static_cast<size_t>(b.task)].kind).data())));
    }
    // The wheel zooms the time axis only.
    gui::TimelineCanvas* canvas = w.timeline_view()->canvas();
    const double before = canvas->zoom();
    QWheelEvent wheel(QPointF(50, 20), canvas->viewport()->mapToGlobal(QPointF(50, 20)), QPoint(), QPoint(0, 120),
                      Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QCoreApplication::sendEvent(canvas->viewport(), &wheel);
    QCOMPARE(canvas->zoom(), before * 1.25);
    QCOMPARE(canvas->transform().m22(), 1.0);
    // The exported trace is the CLI's.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("trace.json"));
    QVERIFY(w.export_trace(path));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll().toStdString(), io::chrome_trace(d));
    // An edit makes the shown timeline stale: it reruns for the new document.
    done.clear();
    field<QSpinBox>(w, "/training/pp")->setValue(2);
    QVERIFY(done.wait(120000));
    QCOMPARE(w.timeline_view()->row_labels().front(), QStringLiteral("stage 0 compute"));
    QCOMPARE(w.timeline_view()->row_labels().back().left(7), QStringLiteral("stage 1"));
  }

  /// The scatter and the source table carry io::run_validation's and io::group_errors' numbers.
  void validation_view_shows_the_reports_errors() {
    const QString file = QStringLiteral(CAPSIM_SOURCE_DIR "/data/validation/training-public.json");
    const json r = io::run_validation({file.toStdString()});
    const json g = io::group_errors(r, "source");
    gui::MainWindow w;
    QSignalSpy done(&w, &gui::MainWindow::validation_finished);
    w.run_validation_now({file});
    QVERIFY(w.validation_view()->running());
    QVERIFY(done.wait(240000));
    QVERIFY(!w.validation_view()->running());
    std::vector<QPointF> expected;
    std::string first_id;
    for (const json& c : r["cases"]) {
      if (c["status"] != "ok") continue;
      if (first_id.empty()) first_id = c["id"].get<std::string>();
      for (auto it = c["error"].begin(); it != c["error"].end(); ++it)
        expected.emplace_back(c["measured"][it.key()].get<double>(), c["predicted"][it.key()].get<double>());
    }
    QVERIFY(!expected.empty());
    QCOMPARE(w.validation_view()->points(), expected);
    for (auto gi = g.begin(); gi != g.end(); ++gi)
      for (auto mi = gi.value().begin(); mi != gi.value().end(); ++mi) {
        const gui::ValidationGroupRow row =
            w.validation_view()->group_row(QString::fromStdString(gi.key()), QString::fromStdString(mi.key()));
        QCOMPARE(row.n, mi.value()["n"].get<int64_t>());
        QCOMPARE(row.median_abs, mi.value()["median_abs_error"].get<double>());
        QCOMPARE(row.p90_abs, mi.value()["p90_abs_error"].get<double>());
        QCOMPARE(row.signed_median, mi.value()["signed_median_error"].get<double>());
      }
    QCOMPARE(w.validation_view()->group_row(QStringLiteral("no-such-source")).n, int64_t{-1});
    // Grouped by job size, as `--group-by gpus`: the groups in count order, io::group_errors'
    // numbers, the chart as it was; back to the source families after.
    QCOMPARE(w.validation_view()->group_by(), QStringLiteral("source"));
    QVERIFY(!w.validation_view()->set_group_by(QStringLiteral("family")));
    QVERIFY(w.validation_view()->set_group_by(QStringLiteral("gpus")));
    const json by_size = io::group_errors(r, "gpus");
    auto* sized = w.validation_view()->findChild<QTreeWidget*>();
    QVERIFY(sized && sized->topLevelItemCount() == static_cast<int>(by_size.size()));
    QStringList order;
    for (int i = 0; i < sized->topLevelItemCount(); ++i) order << sized->topLevelItem(i)->text(0);
    QStringList want;
    for (const std::string& name : io::ordered_group_names(by_size)) want << QString::fromStdString(name);
    QCOMPARE(order, want);
    QCOMPARE(order.front(), QStringLiteral("2-8"));
    for (auto gi = by_size.begin(); gi != by_size.end(); ++gi) {
      const gui::ValidationGroupRow row = w.validation_view()->group_row(QString::fromStdString(gi.key()));
      QCOMPARE(row.n, gi.value()["(all)"]["n"].get<int64_t>());
      QCOMPARE(row.signed_median, gi.value()["(all)"]["signed_median_error"].get<double>());
    }
    QCOMPARE(w.validation_view()->points(), expected);
    QVERIFY(w.validation_view()->set_group_by(QStringLiteral("source")));
    // A case picked in the table: its id and its errors.
    QVERIFY(w.validation_view()->select_case(QString::fromStdString(first_id)));
    const QString detail = w.validation_view()->detail();
    QVERIFY2(detail.startsWith(QString::fromStdString(first_id)), qPrintable(detail));
    for (const json& c : r["cases"])
      if (c["id"] == first_id)
        for (auto it = c["error"].begin(); it != c["error"].end(); ++it)
          QVERIFY2(detail.contains(QStringLiteral("%1: predicted").arg(QString::fromStdString(it.key()))) &&
                       detail.contains(QStringLiteral("%1 %").arg(100 * it.value().get<double>(), 0, 'f', 1)),
                   qPrintable(detail));
    // A click on the case row loads the case into the editor: its document is the case,
    // its report the CLI's for the case file's scenario.
    auto* tree = w.validation_view()->findChild<QTreeWidget*>();
    QVERIFY(tree && tree->currentItem());
    QCOMPARE(tree->currentItem()->text(0), QString::fromStdString(first_id));
    emit tree->itemClicked(tree->currentItem(), 0);
    QCOMPARE(w.views()->currentIndex(), 0);
    QCOMPARE(w.panel()->kind(), gui::ScenarioKind::training);
    json the_case;
    const json cases_file = io::read_json_file(file.toStdString());
    for (const json& c : cases_file["cases"])
      if (c["id"] == first_id) the_case = c;
    QVERIFY2(w.panel()->document(gui::ScenarioKind::training) == the_case,
             json::diff(the_case, w.panel()->document(gui::ScenarioKind::training)).dump().c_str());
    QCOMPARE(w.current_report().toStdString(),
             io::dump(cli_train_report(the_case, std::filesystem::path(file.toStdString()).parent_path())));
    QCOMPARE(w.panel()->document(gui::ScenarioKind::inference)["system"], the_case["system"]);
    QVERIFY(!w.validation_view()->load_case(QStringLiteral("no-such-case")));
    w.views()->setCurrentWidget(w.validation_view());
    // A newer run drops the one in flight: one result, the newer one's.
    done.clear();
    w.run_validation_now({QStringLiteral(CAPSIM_SOURCE_DIR "/data/validation/no-such-file.json")});
    w.run_validation_now({file});
    QVERIFY(done.wait(240000));
    QTest::qWait(200);
    QCOMPARE(done.count(), 1);
    QCOMPARE(w.validation_view()->points(), expected);
  }

  /// With CAPSIM_GUI_SCREENSHOTS=<folder> (docs/images), each tab as a PNG.
  void screenshots() {
    const QString out = qEnvironmentVariable("CAPSIM_GUI_SCREENSHOTS");
    if (out.isEmpty()) QSKIP("set CAPSIM_GUI_SCREENSHOTS to a folder to write the screenshots");
    QDir().mkpath(out);
    gui::MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.pin_report());
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    field<QDoubleSpinBox>(w, "/training/train_tokens")->setValue(1e12);
    field<QDoubleSpinBox>(w, "/training/usd_per_gpu_hour")->setValue(4.92);
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-training.png")));
    w.views()->setCurrentWidget(w.compare_view());
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-compare.png")));
    w.views()->setCurrentIndex(0);
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("llama3-70b"));
    field<QComboBox>(w, "/training/zero")->setCurrentText(QStringLiteral("0"));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-training-does-not-fit.png")));
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("llama3-8b"));
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    QSignalSpy qps(&w, &gui::MainWindow::qps_finished);
    w.run_qps_now();
    QVERIFY(qps.wait(240000));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-serving.png")));
    // A serving pin against tp 2.
    QVERIFY(w.pin_report());
    field<QSpinBox>(w, "/inference/tp")->setValue(2);
    QVERIFY(done.wait(120000));
    w.views()->setCurrentWidget(w.compare_view());
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-compare-serving.png")));
    w.unpin_report();
    field<QSpinBox>(w, "/inference/tp")->setValue(1);

    QSignalSpy validated(&w, &gui::MainWindow::validation_finished);
    w.views()->setCurrentWidget(w.validation_view());
    w.run_validation_now();
    QVERIFY(validated.wait(280000));
    QVERIFY(w.validation_view()->select_case(QStringLiteral("narayanan21-t1-1.7b")));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-validation.png")));

    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("llama3-8b"));
    w.panel()->set_kind(gui::ScenarioKind::training);
    QSignalSpy searched(&w, &gui::MainWindow::search_finished);
    w.views()->setCurrentWidget(w.search_view());
    w.search_view()->set_gpu_counts(QStringLiteral("8, 16, 32, 64"));
    w.run_search_now();
    QVERIFY(searched.wait(240000));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-search.png")));

    field<QSpinBox>(w, "/system/num_gpus")->setValue(8);
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    field<QSpinBox>(w, "/training/pp")->setValue(4);
    QSignalSpy timed(&w, &gui::MainWindow::timeline_finished);
    w.views()->setCurrentWidget(w.timeline_view());
    QVERIFY(timed.wait(120000));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-timeline.png")));

    QVERIFY(w.open_calibration(QStringLiteral(CAPSIM_SOURCE_DIR "/data/calibration/h100-nccl-tests-public.json")));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-calibration.png")));

    QVERIFY(w.open_serving_result(QStringLiteral(CAPSIM_SOURCE_DIR "/tests/data/serving-steps/synthetic-result.json")));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-serving-steps.png")));
  }

 private:
  QTemporaryDir settings_dir_;
};

QTEST_MAIN(GuiTest)
#include "test_gui.moc"
