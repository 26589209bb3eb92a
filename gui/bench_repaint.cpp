#include "bench_repaint.hpp"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QGuiApplication>
#include <QSpinBox>
#include <QSysInfo>
#include <QTabWidget>
#include <QThread>

#include "capsim/core/serving.hpp"
#include "main_window.hpp"
#include "scenario_panel.hpp"
#include "training_view.hpp"

namespace capsim::gui {

namespace {

QSpinBox* spin(MainWindow& w, const char* pointer) {
  auto* box = w.panel()->findChild<QSpinBox*>(QString::fromUtf8(pointer));
  if (!box) qFatal("no editor field %s", pointer);
  return box;
}

QString cpu_model() {
  QFile f(QStringLiteral("/proc/cpuinfo"));
  if (f.open(QIODevice::ReadOnly))
    for (const QByteArray& line : f.readAll().split('\n'))
      if (line.startsWith("model name")) return QString::fromUtf8(line.mid(line.indexOf(':') + 1)).trimmed();
  return QSysInfo::currentCpuArchitecture();
}

}  // namespace

namespace {

/// Times `edits` knob changes on the tab of `kind` (after `warmup` untimed ones): `edit` makes
/// the change and returns once the tab shows its result; then what the event loop does next,
/// the replaced chart items' deferred deletes (without an event loop running they would pile
/// up in the scenes) and the scenes' queued updates, up to a repainted window.
template <class Edit>
RepaintTimes time_repaints(MainWindow& w, ScenarioKind kind, int edits, int warmup, Edit&& edit) {
  w.panel()->set_kind(kind);
  w.views()->setCurrentIndex(0);
  w.show();
  QCoreApplication::processEvents();
  spin(w, "/system/num_gpus")->setValue(8);
  RepaintTimes t;
  QElapsedTimer clock;
  for (int i = -warmup; i < edits; ++i) {
    clock.start();
    edit();
    const double recompute = static_cast<double>(clock.nsecsElapsed()) * 1e-6;
    QCoreApplication::sendPostedEvents(nullptr, QEvent::DeferredDelete);
    QCoreApplication::processEvents();
    w.repaint();
    const double total = static_cast<double>(clock.nsecsElapsed()) * 1e-6;
    if (i < 0) continue;
    t.recompute_ms.push_back(recompute);
    t.total_ms.push_back(total);
  }
  return t;
}

}  // namespace

RepaintTimes time_training_repaints(MainWindow& w, int edits) {
  QSpinBox* tp = spin(w, "/training/tp");
  // The training tab evaluates and fills itself synchronously on the change.
  return time_repaints(w, ScenarioKind::training, edits, 2, [&] { tp->setValue(tp->value() == 1 ? 2 : 1); });
}

RepaintTimes time_serving_repaints(MainWindow& w, int edits) {
  QSpinBox* tp = spin(w, "/inference/tp");
  return time_repaints(w, ScenarioKind::inference, edits, 1, [&] {
    QEventLoop loop;
    const QMetaObject::Connection done = QObject::connect(&w, &MainWindow::serving_finished, &loop, &QEventLoop::quit);
    tp->setValue(tp->value() == 1 ? 2 : 1);
    w.run_serving_now();  // at once: the pause that waits for typing to end is not timed
    loop.exec();          // until the tab shows the run's result
    QObject::disconnect(done);
  });
}

QString machine_description() {
  return QStringLiteral("%1, %2, %3 logical cores, Qt %4 platform \"%5\"")
      .arg(QSysInfo::prettyProductName(), cpu_model())
      .arg(QThread::idealThreadCount())
      .arg(QString::fromLatin1(qVersion()), QGuiApplication::platformName());
}

namespace {

QString timing_line(const char* what, const std::vector<double>& ms) {
  return QStringLiteral("%1: median %2 ms, p90 %3 ms\n")
      .arg(QString::fromLatin1(what))
      .arg(ms.empty() ? 0.0 : percentile(ms, 0.5), 0, 'f', 2)
      .arg(ms.empty() ? 0.0 : percentile(ms, 0.9), 0, 'f', 2);
}

}  // namespace

QString serving_repaint_summary(const RepaintTimes& t) {
  return QStringLiteral("machine: %1\nedits: %2 (Serving tab, tp 1 <-> 2, default workload, replicated runs)\n")
             .arg(machine_description())
             .arg(t.total_ms.size()) +
         timing_line("simulate", t.recompute_ms) + timing_line("simulate + repaint", t.total_ms);
}

QString repaint_summary(const RepaintTimes& t) {
  auto line = [](const char* what, const std::vector<double>& ms) {
    return QStringLiteral("%1: median %2 ms, p90 %3 ms\n")
        .arg(QString::fromLatin1(what))
        .arg(ms.empty() ? 0.0 : percentile(ms, 0.5), 0, 'f', 2)
        .arg(ms.empty() ? 0.0 : percentile(ms, 0.9), 0, 'f', 2);
  };
  return QStringLiteral("machine: %1\nedits: %2 (Training tab, tp 1 <-> 2, analytical engine)\n")
             .arg(machine_description())
             .arg(t.total_ms.size()) +
         line("recompute", t.recompute_ms) + line("recompute + repaint", t.total_ms);
}

}  // namespace capsim::gui
