#pragma once
/// Calibration: a profile (`capsim calibrate fit`) against the default model: GEMM
/// efficiency by shape and collective bus bandwidth by message size, measured and default.

#include <QString>
#include <QWidget>
#include <vector>

#include "evaluation.hpp"

class QChart;
class QCheckBox;
class QComboBox;
class QLabel;
class QPushButton;

namespace capsim::gui {

/// Shows one loaded profile, or why it did not load.
class CalibrationView : public QWidget {
  Q_OBJECT

 public:
  /// Empty until a profile is shown.
  explicit CalibrationView(QWidget* parent = nullptr);

  /// Draw `outcome` (loaded from `path`); a profile that did not read clears the charts and
  /// shows the command line's message.
  void show_outcome(const QString& path, const CalibrationOutcome& outcome);
  /// The error line; empty when the profile read.
  QString error() const;
  /// The line naming the profile and the default model's system.
  QString info() const;
  /// Pick the GEMM dtype / collective shown (their combo box entries).
  bool select_gemm(const QString& dtype);
  bool select_collective(const QString& label);
  /// The collective choices ("all_reduce x8 intra-node", ...).
  QStringList collective_labels() const;
  /// The points of the GEMM chart's series `name` ("measured", "default model"):
  /// (FLOPs, % of peak).
  std::vector<QPointF> gemm_points(const QString& name) const;
  /// The points of the collective chart's series `name`: (bytes, GB/s).
  std::vector<QPointF> collective_points(const QString& name) const;
  /// Whether the collective chart's x axis is logarithmic.
  bool collective_axis_is_log() const;
  /// Whether "Use this profile for predictions" is checked (only while a profile is loaded).
  bool use_for_predictions() const;
  /// Check or clear "Use this profile for predictions"; ignored while no profile is loaded.
  void set_use_for_predictions(bool use);

 signals:
  /// The user asked to open a profile.
  void open_requested();
  /// "Use this profile for predictions" was checked or cleared.
  void use_toggled(bool use);

 private:
  void draw_gemm();
  void draw_collective();
  CalibrationOutcome outcome_;
  QPushButton* open_ = nullptr;
  QCheckBox* use_ = nullptr;
  QLabel* path_ = nullptr;
  QLabel* error_ = nullptr;
  QLabel* info_ = nullptr;
  QComboBox* gemm_choice_ = nullptr;
  QComboBox* coll_choice_ = nullptr;
  QChart* gemm_chart_ = nullptr;
  QChart* coll_chart_ = nullptr;
};

}  // namespace capsim::gui
