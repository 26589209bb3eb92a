#pragma once
/// The pipeline timeline of one training step on the discrete-event engine
/// (`capsim train --engine des`): one row per pipeline stage's compute stream, a rectangle
/// per task, the wheel zooming in time; the run's Chrome/Perfetto trace can be exported.

#include <QGraphicsView>
#include <QString>
#include <QWidget>
#include <memory>
#include <vector>

#include "evaluation.hpp"

class QLabel;
class QProgressBar;
class QPushButton;

namespace capsim::gui {

/// The drawing: time to the right, the wheel zooms the time axis under the mouse.
class TimelineCanvas : public QGraphicsView {
  Q_OBJECT

 public:
  explicit TimelineCanvas(QWidget* parent = nullptr);
  /// Horizontal magnification, 1 as first drawn.
  double zoom() const;

 protected:
  void wheelEvent(QWheelEvent* event) override;
};

/// One task as drawn.
struct TimelineBox {
  int row = 0;             ///< the row of its stage and stream, top first
  int task = 0;            ///< index into the simulation's tasks
  double start_s = 0, end_s = 0;
  QString tooltip;
};

/// Run control, the timeline, trace export.
class TimelineView : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineView(QWidget* parent = nullptr);

  /// A run started.
  void show_running();
  /// Nothing to show; say `why`.
  void show_idle(const QString& why);
  /// Draw a finished run.
  void show_outcome(const TimelineOutcome& outcome);
  bool running() const;
  QString status() const;

  /// The rows' labels, top first: per stage its compute stream, then its communication
  /// streams that carry tasks ("stage 0 compute", "stage 0 pp send/recv", ...).
  QStringList row_labels() const;
  /// Every task drawn, in task order.
  std::vector<TimelineBox> boxes() const;
  /// The tooltip of whatever is drawn at scene point `p` (empty when nothing).
  QString tooltip_at(const QPointF& p) const;
  /// Scene x of time `s` seconds, as first drawn.
  double scene_x(double s) const { return s * px_per_s_; }
  /// The scene y of the middle of `row`.
  double scene_y(int row) const;
  TimelineCanvas* canvas() const { return canvas_; }

 signals:
  void run_requested();
  void export_requested();

 private:
  TimelineCanvas* canvas_ = nullptr;
  QLabel* status_ = nullptr;
  QProgressBar* busy_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* export_ = nullptr;
  QStringList labels_;
  std::vector<TimelineBox> boxes_;
  double px_per_s_ = 1;
};

}  // namespace capsim::gui
