// capsim-gui: a what-if explorer over the same libraries as the capsim command.

#include <QApplication>

#include "main_window.hpp"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("capsim"));
  QApplication::setApplicationName(QStringLiteral("capsim-gui"));
  QApplication::setApplicationVersion(QStringLiteral(CAPSIM_VERSION));
  capsim::gui::MainWindow window;
  const QStringList args = QApplication::arguments();
  if (args.size() > 1) window.open_file(args.at(1));
  window.show();
  return QApplication::exec();
}
