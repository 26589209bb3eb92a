// capsim-gui against the libraries it shows: the charts carry the report's numbers, the
// reports are the CLI's bytes, bad input shows its problems and no stale result.

#include <QComboBox>
#include <QDir>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "capsim/core/units.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"
#include "evaluation.hpp"
#include "main_window.hpp"
#include "serving_view.hpp"
#include "training_view.hpp"

using namespace capsim;
using nlohmann::json;

namespace {

/// What `capsim train --format json` prints for `doc`.
json cli_train_report(const json& doc, const std::filesystem::path& base = {}) {
  const Scenario s = io::scenario_from_json(doc, base);
  const io::CostModels costs(s.system, nullptr);
  return io::analytical_train_report(s, evaluate_training(s, &costs.get()));
}

template <class W>
W* field(gui::MainWindow& w, const char* pointer) {
  W* widget = w.panel()->findChild<W*>(QString::fromUtf8(pointer));
  if (!widget) qFatal("no widget for %s", pointer);
  return widget;
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
    QCOMPARE(w.training_view()->step_values().size(), size_t{5});
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

  /// With CAPSIM_GUI_SCREENSHOTS=<folder> (docs/images), each tab as a PNG.
  void screenshots() {
    const QString out = qEnvironmentVariable("CAPSIM_GUI_SCREENSHOTS");
    if (out.isEmpty()) QSKIP("set CAPSIM_GUI_SCREENSHOTS to a folder to write the screenshots");
    QDir().mkpath(out);
    gui::MainWindow w;
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    field<QSpinBox>(w, "/training/tp")->setValue(2);
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-training.png")));
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("llama3-70b"));
    field<QComboBox>(w, "/training/zero")->setCurrentText(QStringLiteral("0"));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-training-does-not-fit.png")));
    field<QComboBox>(w, "/model")->setCurrentText(QStringLiteral("llama3-8b"));
    QSignalSpy done(&w, &gui::MainWindow::serving_finished);
    w.panel()->set_kind(gui::ScenarioKind::inference);
    QVERIFY(done.wait(120000));
    QTest::qWait(200);
    QVERIFY(w.grab().save(out + QStringLiteral("/gui-serving.png")));
  }

 private:
  QTemporaryDir settings_dir_;
};

QTEST_MAIN(GuiTest)
#include "test_gui.moc"
