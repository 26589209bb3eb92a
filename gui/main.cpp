// capsim-gui: a what-if explorer over the same libraries as the capsim command.

#include <QApplication>
#include <QTextStream>

#include "bench_repaint.hpp"
#include "main_window.hpp"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("capsim"));
  QApplication::setApplicationName(QStringLiteral("capsim-gui"));
  QApplication::setApplicationVersion(QStringLiteral(CAPSIM_VERSION));
  capsim::gui::MainWindow window;
  const QStringList args = QApplication::arguments();
  const bool bench_training = args.size() > 1 && args.at(1) == QStringLiteral("--bench-repaint");
  const bool bench_serving = args.size() > 1 && args.at(1) == QStringLiteral("--bench-serving-repaint");
  if (bench_training || bench_serving) {
    // Time the tab's recompute (or simulation) and repaint after edits, print the figures, quit.
    bool ok = false;
    const int edits = args.size() > 2 ? args.at(2).toInt(&ok) : 0;
    if (!ok || edits < 1) {
      QTextStream(stderr) << "usage: capsim-gui " << args.at(1) << " N (N edits, N >= 1)\n";
      return 2;
    }
    window.resize(1280, 800);
    QTextStream(stdout) << (bench_training
                                ? capsim::gui::repaint_summary(capsim::gui::time_training_repaints(window, edits))
                                : capsim::gui::serving_repaint_summary(
                                      capsim::gui::time_serving_repaints(window, edits)));
    return 0;
  }
  if (args.size() > 1) window.open_file(args.at(1));
  window.show();
  return QApplication::exec();
}
