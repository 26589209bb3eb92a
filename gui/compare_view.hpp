#pragma once
/// Compare: a pinned report (training or serving) beside the current report of the same
/// kind, metric by metric (pinned, current, difference, relative difference), the metrics
/// that differ highlighted.

#include <QString>
#include <QWidget>
#include <optional>
#include <string>

class QCheckBox;
class QLabel;
class QPushButton;
class QTableWidget;

namespace capsim::gui {

/// One metric of the compare table; NaN where a report lacks it.
struct CompareRow {
  QString key, unit;
  double pinned = 0, current = 0;
  double difference = 0;  ///< current - pinned
  double relative = 0;    ///< difference / |pinned|; NaN when pinned is 0 and they differ
  bool differs = false;
};

/// The pinned report against the current one.
class CompareView : public QWidget {
  Q_OBJECT

 public:
  /// Empty until a report is pinned.
  explicit CompareView(QWidget* parent = nullptr);

  /// Show `pinned` against `current` (the CLI's JSON reports of one kind, "training" or
  /// "serving"; empty when there is none). `note` follows the count of differing metrics
  /// (why there is no current report, or that the editor shows the other kind).
  void show_reports(const std::string& pinned, const std::string& current, const QString& kind = QStringLiteral("training"),
                    const QString& note = {});
  /// The table's row for the report key `key` ("time.step_s"); nullopt when absent.
  std::optional<CompareRow> row(const QString& key) const;
  /// Rows in the table, shown or not.
  int rows() const;
  /// Rows shown (all, or only the metrics that differ).
  int shown_rows() const;
  /// Show only the metrics that differ (the default) or all of them.
  void set_only_differences(bool only);
  /// The line above the table.
  QString status() const;

 signals:
  /// The user asked to pin the front scenario's current report.
  void pin_requested();
  /// The user asked to drop the pinned report.
  void unpin_requested();

 private:
  void apply_filter();
  QTableWidget* table_ = nullptr;
  QLabel* status_ = nullptr;
  QCheckBox* only_differences_ = nullptr;
  QPushButton* pin_ = nullptr;
  QPushButton* unpin_ = nullptr;
};

}  // namespace capsim::gui
