#pragma once
/// Validation results: published measurements against the models' predictions as a
/// log-log scatter with ±10 % and ±25 % bands, and the error table by source family or any
/// other `capsim validate --group-by` key (job size, GPU, engine, model, mode); a case
/// picked in the table shows its errors.

#include <QString>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "evaluation.hpp"

class QChart;
class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QScatterSeries;
class QTreeWidget;
class QTreeWidgetItem;

namespace capsim::gui {

/// Shows one validation run and the state of the run in flight.
class ValidationView : public QWidget {
  Q_OBJECT

 public:
  explicit ValidationView(QWidget* parent = nullptr);

  /// A run of `files` started: busy bar on, figures cleared.
  void show_running(const QStringList& files);
  /// Draw a finished run.
  void show_outcome(const ValidationOutcome& outcome);
  /// Whether a run is shown as in flight.
  bool running() const;
  /// The status line.
  QString status() const;

  /// The scatter's points as (measured, predicted), in report order.
  std::vector<QPointF> points() const;
  /// The statistics the table shows for `group` and `metric` ("(all)" on the group's own
  /// row); n < 0 when there is no such row.
  ValidationGroupRow group_row(const QString& group, const QString& metric = QStringLiteral("(all)")) const;
  /// Select the case `id` in the table as a click does; false when it is not listed.
  bool select_case(const QString& id);
  /// Offer case `id` to the editor, as a click on its row does (case_chosen). False when
  /// no row has that id.
  bool load_case(const QString& id);
  /// What the detail line says about the selected case.
  QString detail() const;
  /// Group the table by `key` (one of validation_group_keys(), as `--group-by` takes it);
  /// false for another key. The chart does not change.
  bool set_group_by(const QString& key);
  /// The key the table is grouped by.
  QString group_by() const;

 signals:
  /// The user asked to run the default files (data/validation/*.json) again.
  void run_requested();
  /// The user picked files to run.
  void files_chosen(const QStringList& files);
  /// A case row was clicked (or activated): load case `id` of the file named `file` (its
  /// file name, as the report names it) into the editor.
  void case_chosen(const QString& file, const QString& id);

 private:
  void clear_figures();
  void on_item(QTreeWidgetItem* item);
  /// The table for the key the combo shows, from outcome_.
  void build_table();
  QChart* chart_ = nullptr;
  QScatterSeries* cases_ = nullptr;
  QScatterSeries* selected_ = nullptr;
  QTreeWidget* table_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* detail_ = nullptr;
  QProgressBar* busy_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* open_ = nullptr;
  QComboBox* group_by_ = nullptr;
  std::vector<ValidationPoint> points_;
  ValidationOutcome outcome_;
};

}  // namespace capsim::gui
