#include "timeline_view.hpp"

#include <QGraphicsRectItem>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QScrollBar>
#include <QPushButton>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace capsim::gui {

namespace {

constexpr double kRowHeight = 34;
constexpr double kBoxHeight = 24;
constexpr double kWidth = 1000;  ///< scene width of the whole step as first drawn
constexpr double kLabelWidth = 150;  ///< room left of the step for the row labels (pixels)

QColor task_color(des::TaskKind k) {
  switch (k) {
    case des::TaskKind::forward: return QColor(0x4e, 0x79, 0xa7);
    case des::TaskKind::backward: return QColor(0x59, 0xa1, 0x4f);
    case des::TaskKind::weight_grad: return QColor(0x76, 0xb7, 0xb2);
    case des::TaskKind::send: return QColor(0xe1, 0x57, 0x59);
    case des::TaskKind::gather:
    case des::TaskKind::reduce: return QColor(0xf2, 0x8e, 0x2b);
    case des::TaskKind::optimizer: return QColor(0xba, 0xb0, 0xac);
    case des::TaskKind::other: break;
  }
  return QColor(0x9c, 0x75, 0x5f);
}

QString ms(double s) {
  return QStringLiteral("%1 ms").arg(1e3 * s, 0, 'f', 3);
}

}  // namespace

TimelineCanvas::TimelineCanvas(QWidget* parent) : QGraphicsView(parent) {
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setRenderHint(QPainter::Antialiasing, false);
  setAlignment(Qt::AlignLeft | Qt::AlignTop);
  setDragMode(QGraphicsView::ScrollHandDrag);
}

double TimelineCanvas::zoom() const {
  return transform().m11();
}

void TimelineCanvas::wheelEvent(QWheelEvent* event) {
  const int dy = event->angleDelta().y();
  if (dy == 0) {
    QGraphicsView::wheelEvent(event);
    return;
  }
  const double factor = std::pow(1.25, dy / 120.0);
  const double z = zoom() * factor;
  if (z < 0.05 || z > 2000) return;  // far enough either way
  scale(factor, 1);
  event->accept();
}

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  run_ = new QPushButton(tr("Run step"));
  run_->setObjectName(QStringLiteral("run_timeline"));
  run_->setToolTip(tr("Run one training step of the scenario on the discrete-event engine"));
  export_ = new QPushButton(tr("Export trace..."));
  export_->setObjectName(QStringLiteral("export_trace"));
  export_->setToolTip(tr("Write the step as Chrome trace JSON (opens in ui.perfetto.dev)"));
  export_->setEnabled(false);
  busy_ = new QProgressBar;
  busy_->setRange(0, 0);
  busy_->setVisible(false);
  busy_->setMaximumWidth(120);
  status_ = new QLabel(tr("Run the training scenario's step on the discrete-event engine."));
  status_->setObjectName(QStringLiteral("timeline_status"));
  status_->setWordWrap(true);
  bar->addWidget(run_);
  bar->addWidget(export_);
  bar->addWidget(busy_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);
  canvas_ = new TimelineCanvas;
  canvas_->setObjectName(QStringLiteral("timeline"));
  canvas_->setScene(new QGraphicsScene(canvas_));
  layout->addWidget(canvas_, 1);
  auto* legend = new QLabel;
  QStringList keys;
  for (auto k : {des::TaskKind::forward, des::TaskKind::backward, des::TaskKind::weight_grad, des::TaskKind::optimizer,
                 des::TaskKind::other})
    keys << QStringLiteral("<span style='color:%1'>&#9632;</span> %2")
                .arg(task_color(k).name(), QString::fromUtf8(des::to_string(k).data(), static_cast<qsizetype>(des::to_string(k).size())));
  legend->setText(keys.join(QStringLiteral("&nbsp;&nbsp; ")) + tr("&nbsp;&nbsp; (wheel: zoom in time, drag: pan)"));
  layout->addWidget(legend);
  connect(run_, &QPushButton::clicked, this, &TimelineView::run_requested);
  connect(export_, &QPushButton::clicked, this, &TimelineView::export_requested);
}

void TimelineView::show_running() {
  show_idle(tr("Running the step ..."));
  busy_->setVisible(true);
  run_->setEnabled(false);
}

void TimelineView::show_idle(const QString& why) {
  canvas_->scene()->clear();
  canvas_->resetTransform();
  labels_.clear();
  boxes_.clear();
  busy_->setVisible(false);
  run_->setEnabled(true);
  export_->setEnabled(false);
  status_->setText(why);
}

bool TimelineView::running() const {
  return !busy_->isHidden();
}

QString TimelineView::status() const {
  return status_->text();
}

double TimelineView::scene_y(int row) const {
  return row * kRowHeight + kBoxHeight / 2;
}

void TimelineView::show_outcome(const TimelineOutcome& out) {
  show_idle(QString());
  if (!out.ok() || !out.des) {
    status_->setText(out.internal_error.empty()
                         ? tr("No result: the training input has problems (listed under the editor).")
                         : tr("Internal error: %1").arg(QString::fromStdString(out.internal_error)));
    return;
  }
  const DesStep& d = *out.des;
  const auto& tasks = d.sim.tasks();
  const auto& streams = d.sim.streams();
  // One row per stage and stream: each stage's compute stream, then its communication
  // streams (TP, PP send/recv, DP, EP) that carry tasks.
  std::map<std::pair<int32_t, int>, int> row_of;  // (pipeline rank, stream kind) -> row
  for (const des::Stream& s : streams)
    if (s.kind == des::StreamKind::compute) row_of.emplace(std::pair{s.rank, static_cast<int>(s.kind)}, 0);
  for (const des::Task& t : tasks) {
    const des::Stream& s = streams.at(static_cast<size_t>(t.stream));
    row_of.emplace(std::pair{s.rank, static_cast<int>(s.kind)}, 0);
  }
  int row = 0;
  for (auto& [key, r] : row_of) {
    r = row++;
    const auto kind = static_cast<des::StreamKind>(key.second);
    labels_ << tr("stage %1 %2").arg(key.first).arg(QString::fromUtf8(des::to_string(kind).data(),
                                                                       static_cast<qsizetype>(des::to_string(kind).size())));
  }
  const double makespan = std::max(d.result.makespan, 1e-12);
  px_per_s_ = kWidth / makespan;
  QGraphicsScene* scene = canvas_->scene();
  for (size_t i = 0; i < tasks.size(); ++i) {
    const des::Task& t = tasks[i];
    const des::Stream& s = streams.at(static_cast<size_t>(t.stream));
    const des::TaskTime& tt = d.result.times.at(i);
    TimelineBox b;
    b.row = row_of.at(std::pair{s.rank, static_cast<int>(s.kind)});
    b.task = static_cast<int>(i);
    b.start_s = tt.start;
    b.end_s = tt.end;
    QString what = QString::fromUtf8(des::to_string(t.kind).data(), static_cast<qsizetype>(des::to_string(t.kind).size()));
    if (t.microbatch >= 0) what += tr(", microbatch %1").arg(t.microbatch);
    if (t.chunk >= 0) what += tr(", chunk %1").arg(t.chunk);
    b.tooltip = tr("%1\n%2, task %3\n%4 to %5 (%6)")
                    .arg(what)
                    .arg(labels_[b.row])
                    .arg(i)
                    .arg(ms(tt.start), ms(tt.end), ms(tt.end - tt.start));
    if (t.flops > 0) b.tooltip += tr("\n%1 TFLOP").arg(t.flops / 1e12, 0, 'g', 4);
    auto* rect = scene->addRect(QRectF(scene_x(tt.start), b.row * kRowHeight, scene_x(tt.end) - scene_x(tt.start), kBoxHeight),
                                QPen(task_color(t.kind).darker(140), 0), QBrush(task_color(t.kind)));
    rect->setToolTip(b.tooltip);
    boxes_.push_back(b);
  }
  // First view: the whole step across the pane, the stage labels in sight to its left.
  const double pane = std::max(200.0, static_cast<double>(canvas_->viewport()->width()) - kLabelWidth - 50.0);
  const double fit = pane / kWidth;
  // Row labels and a time axis that keep their size when the time axis zooms.
  for (int r = 0; r < labels_.size(); ++r) {
    auto* label = scene->addSimpleText(labels_[r]);
    label->setFlag(QGraphicsItem::ItemIgnoresTransformations);
    label->setPos(-kLabelWidth / fit, r * kRowHeight + 4);
  }
  const double axis_y = static_cast<double>(labels_.size()) * kRowHeight + 4;
  scene->addLine(0, axis_y, kWidth, axis_y, QPen(Qt::gray, 0));
  // Five ticks with three significant digits: labels that fit the first view's width.
  for (int i = 0; i <= 5; ++i) {
    const double x = kWidth * i / 5;
    scene->addLine(x, axis_y, x, axis_y + 5, QPen(Qt::gray, 0));
    auto* tick = scene->addSimpleText(makespan >= 1.0 ? tr("%1 s").arg(makespan * i / 5, 0, 'g', 3)
                                                      : tr("%1 ms").arg(makespan * i / 5 * 1e3, 0, 'g', 3));
    tick->setFlag(QGraphicsItem::ItemIgnoresTransformations);
    tick->setPos(x, axis_y + 6);
  }
  scene->setSceneRect(scene->itemsBoundingRect().adjusted(-10, -10, 80, 10));
  canvas_->resetTransform();
  canvas_->scale(fit, 1);
  canvas_->horizontalScrollBar()->setValue(canvas_->horizontalScrollBar()->minimum());
  export_->setEnabled(!out.trace.empty());
  double busy = 0;
  for (double b : d.busy_s) busy += b;
  std::set<int32_t> stages;
  for (const auto& [key, r] : row_of) stages.insert(key.first);
  status_->setText(tr("%1 schedule, %2 tasks on %3 stages: step %4 s (critical path bound %5 s), compute busy %6 %")
                       .arg(QString::fromUtf8(to_string(d.schedule).data()))
                       .arg(tasks.size())
                       .arg(stages.size())
                       .arg(d.step.step_s, 0, 'f', 4)
                       .arg(d.critical_path_bound_s, 0, 'f', 4)
                       .arg(d.busy_s.empty() ? 0.0 : 100 * busy / (makespan * static_cast<double>(d.busy_s.size())), 0, 'f', 1));
}

QStringList TimelineView::row_labels() const {
  return labels_;
}

std::vector<TimelineBox> TimelineView::boxes() const {
  return boxes_;
}

QString TimelineView::tooltip_at(const QPointF& p) const {
  for (QGraphicsItem* item : canvas_->scene()->items(p))
    if (!item->toolTip().isEmpty()) return item->toolTip();
  return QString();
}

}  // namespace capsim::gui
