#include "calibration_view.hpp"

#include "chart_helpers.hpp"

#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPushButton>
#include <QScatterSeries>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

namespace capsim::gui {

namespace {

const QString kMeasured = QStringLiteral("measured");
const QString kDefault = QStringLiteral("default model");

/// A log axis spanning the decades around [lo, hi].
QLogValueAxis* log_axis(double lo, double hi, const QString& title, const QString& format) {
  auto* axis = new QLogValueAxis;
  axis->setBase(10);
  axis->setTitleText(title);
  axis->setLabelFormat(format);
  axis->setRange(std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi))));
  axis->setMinorTickCount(-1);
  return axis;
}

}  // namespace

CalibrationView::CalibrationView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  open_ = new QPushButton(tr("Open profile..."));
  open_->setObjectName(QStringLiteral("open_profile"));
  open_->setToolTip(tr("A calibration profile written by capsim calibrate fit"));
  path_ = new QLabel(tr("no profile loaded"));
  use_ = new QCheckBox(tr("Use this profile for predictions"));
  use_->setObjectName(QStringLiteral("use_calibration"));
  use_->setToolTip(tr("Training and serving results use the profile in front of the default cost model, as "
                      "capsim train/infer --calibration FILE do (where it was measured on the scenario's GPU)"));
  use_->setEnabled(false);
  bar->addWidget(open_);
  bar->addWidget(path_, 1);
  bar->addWidget(use_);
  layout->addLayout(bar);
  error_ = error_label();
  layout->addWidget(error_);
  info_ = new QLabel;
  info_->setObjectName(QStringLiteral("info"));
  info_->setWordWrap(true);
  layout->addWidget(info_);

  auto* gemm_bar = new QHBoxLayout;
  gemm_choice_ = new QComboBox;
  gemm_choice_->setObjectName(QStringLiteral("gemm_dtype"));
  gemm_bar->addWidget(new QLabel(tr("GEMM dtype")));
  gemm_bar->addWidget(gemm_choice_);
  gemm_bar->addStretch(1);
  layout->addLayout(gemm_bar);
  gemm_chart_ = new QChart;
  gemm_chart_->legend()->setAlignment(Qt::AlignBottom);
  layout->addWidget(chart_view(gemm_chart_, 220), 1);

  auto* coll_bar = new QHBoxLayout;
  coll_choice_ = new QComboBox;
  coll_choice_->setObjectName(QStringLiteral("collective"));
  coll_choice_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  coll_bar->addWidget(new QLabel(tr("Collective")));
  coll_bar->addWidget(coll_choice_);
  coll_bar->addStretch(1);
  layout->addLayout(coll_bar);
  coll_chart_ = new QChart;
  coll_chart_->legend()->setAlignment(Qt::AlignBottom);
  layout->addWidget(chart_view(coll_chart_, 220), 1);

  connect(open_, &QPushButton::clicked, this, &CalibrationView::open_requested);
  connect(use_, &QCheckBox::toggled, this, &CalibrationView::use_toggled);
  connect(gemm_choice_, &QComboBox::currentIndexChanged, this, &CalibrationView::draw_gemm);
  connect(coll_choice_, &QComboBox::currentIndexChanged, this, &CalibrationView::draw_collective);
  show_outcome(QString(), CalibrationOutcome{});
}

void CalibrationView::show_outcome(const QString& path, const CalibrationOutcome& outcome) {
  outcome_ = outcome;
  // A profile that did not read cannot be used: the box clears (and says so by its signal).
  if (!outcome.profile) use_->setChecked(false);
  use_->setEnabled(outcome.profile != nullptr);
  path_->setText(path.isEmpty() ? tr("no profile loaded") : QFileInfo(path).fileName());
  path_->setToolTip(path);
  error_->setText(QString::fromStdString(outcome.error));
  error_->setVisible(!outcome.error.empty());
  if (path.isEmpty())
    info_->setText(tr("Open a profile written by capsim calibrate fit to see what it measured against the "
                      "default model."));
  else if (!outcome.ok())
    info_->clear();
  else
    info_->setText(tr("Profile %1 (measured on %2); %3.")
                       .arg(QString::fromStdString(outcome.name),
                            outcome.gpu.empty() ? tr("an unrecorded GPU") : QString::fromStdString(outcome.gpu),
                            QString::fromStdString(outcome.note)));
  for (QComboBox* c : {gemm_choice_, coll_choice_}) {
    const QSignalBlocker block(c);
    c->clear();
  }
  for (const GemmCurve& g : outcome.gemm) gemm_choice_->addItem(QString::fromStdString(g.dtype));
  for (const CollectiveCurve& c : outcome.collectives) coll_choice_->addItem(QString::fromStdString(c.label));
  gemm_choice_->setEnabled(gemm_choice_->count() > 1);
  coll_choice_->setEnabled(coll_choice_->count() > 1);
  draw_gemm();
  draw_collective();
}

void CalibrationView::draw_gemm() {
  clear_chart(gemm_chart_);
  const int i = gemm_choice_->currentIndex();
  if (i < 0 || i >= static_cast<int>(outcome_.gemm.size())) {
    gemm_chart_->setTitle(outcome_.ok() && !outcome_.name.empty() ? tr("GEMM efficiency: the profile measured no GEMM")
                                                                   : tr("GEMM efficiency by shape"));
    return;
  }
  const GemmCurve& g = outcome_.gemm[static_cast<size_t>(i)];
  gemm_chart_->setTitle(tr("GEMM efficiency by shape (%1, %2 shapes)").arg(QString::fromStdString(g.dtype)).arg(g.flops.size()));
  auto* measured = new QScatterSeries;
  measured->setName(kMeasured);
  measured->setMarkerSize(9);
  auto* model = new QScatterSeries;
  model->setName(kDefault);
  model->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  model->setMarkerSize(7);
  double lo = g.flops.front(), hi = g.flops.front(), top = 0;
  for (size_t p = 0; p < g.flops.size(); ++p) {
    measured->append(g.flops[p], 100 * g.measured[p]);
    model->append(g.flops[p], 100 * g.model[p]);
    lo = std::min(lo, g.flops[p]), hi = std::max(hi, g.flops[p]);
    top = std::max({top, 100 * g.measured[p], 100 * g.model[p]});
  }
  gemm_chart_->addSeries(measured);
  gemm_chart_->addSeries(model);
  QLogValueAxis* x = log_axis(lo, hi, tr("GEMM FLOPs (2mnk)"), QStringLiteral("%.0e"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("% of dense peak"));
  y->setRange(0, std::min(100.0, std::ceil(top / 10 + 1) * 10));
  y->applyNiceNumbers();
  gemm_chart_->addAxis(x, Qt::AlignBottom);
  gemm_chart_->addAxis(y, Qt::AlignLeft);
  for (QXYSeries* s : {static_cast<QXYSeries*>(measured), static_cast<QXYSeries*>(model)}) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

void CalibrationView::draw_collective() {
  clear_chart(coll_chart_);
  const int i = coll_choice_->currentIndex();
  if (i < 0 || i >= static_cast<int>(outcome_.collectives.size())) {
    coll_chart_->setTitle(outcome_.ok() && !outcome_.name.empty()
                              ? tr("Collective bus bandwidth: the profile measured no collective")
                              : tr("Collective bus bandwidth by message size"));
    return;
  }
  const CollectiveCurve& c = outcome_.collectives[static_cast<size_t>(i)];
  coll_chart_->setTitle(tr("Bus bandwidth by message size: %1").arg(QString::fromStdString(c.label)));
  auto* measured = new QLineSeries;
  measured->setName(kMeasured);
  measured->setPointsVisible(true);
  auto* model = new QLineSeries;
  model->setName(kDefault);
  // Dashed and in a colour of its own: where the default model is close, it runs on top of
  // the measured line and both stay visible.
  QPen pen(QColor(0xe0, 0x6c, 0x00));
  pen.setWidth(2);
  pen.setStyle(Qt::DashLine);
  model->setPen(pen);
  double top = 0;
  for (size_t p = 0; p < c.bytes.size(); ++p) {
    measured->append(c.bytes[p], c.measured_gbps[p]);
    model->append(c.bytes[p], c.model_gbps[p]);
    top = std::max({top, c.measured_gbps[p], c.model_gbps[p]});
  }
  coll_chart_->addSeries(measured);
  coll_chart_->addSeries(model);
  QLogValueAxis* x = log_axis(c.bytes.front(), c.bytes.back(), tr("message size (bytes)"), QStringLiteral("%.0e"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("busbw (GB/s)"));
  y->setRange(0, top > 0 ? top * 1.1 : 1);
  y->applyNiceNumbers();
  coll_chart_->addAxis(x, Qt::AlignBottom);
  coll_chart_->addAxis(y, Qt::AlignLeft);
  for (QLineSeries* s : {measured, model}) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

QString CalibrationView::error() const {
  return error_->text();
}

QString CalibrationView::info() const {
  return info_->text();
}

bool CalibrationView::select_gemm(const QString& dtype) {
  const int i = gemm_choice_->findText(dtype);
  if (i >= 0) gemm_choice_->setCurrentIndex(i);
  return i >= 0;
}

bool CalibrationView::select_collective(const QString& label) {
  const int i = coll_choice_->findText(label);
  if (i >= 0) coll_choice_->setCurrentIndex(i);
  return i >= 0;
}

QStringList CalibrationView::collective_labels() const {
  QStringList out;
  for (int i = 0; i < coll_choice_->count(); ++i) out << coll_choice_->itemText(i);
  return out;
}

std::vector<QPointF> CalibrationView::gemm_points(const QString& name) const {
  return points_of(gemm_chart_, name);
}

std::vector<QPointF> CalibrationView::collective_points(const QString& name) const {
  return points_of(coll_chart_, name);
}

bool CalibrationView::collective_axis_is_log() const {
  const QList<QAbstractAxis*> axes = coll_chart_->axes(Qt::Horizontal);
  return !axes.isEmpty() && qobject_cast<QLogValueAxis*>(axes.front()) != nullptr;
}

bool CalibrationView::use_for_predictions() const {
  return use_->isEnabled() && use_->isChecked();
}

void CalibrationView::set_use_for_predictions(bool use) {
  if (use_->isEnabled()) use_->setChecked(use);
}

}  // namespace capsim::gui
