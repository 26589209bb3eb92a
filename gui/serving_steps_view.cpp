#include "serving_steps_view.hpp"

#include "chart_helpers.hpp"

#include <QChart>
#include <QChartView>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QPushButton>
#include <QScatterSeries>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>

namespace capsim::gui {

namespace {

const QString kMeasured = QStringLiteral("measured");
const QString kModel = QStringLiteral("model");

}  // namespace

ServingStepsView::ServingStepsView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  open_ = new QPushButton(tr("Open benchmark result..."));
  open_->setObjectName(QStringLiteral("open_benchmark_result"));
  open_->setToolTip(tr("A serving benchmark's saved per-request timings: benchmark_serving.py --save-result (vLLM) or "
                       "bench_serving.py --output-details (SGLang)"));
  path_ = new QLabel(tr("no benchmark result loaded"));
  bar->addWidget(open_);
  bar->addWidget(path_, 1);
  layout->addLayout(bar);
  error_ = error_label();
  layout->addWidget(error_);
  info_ = new QLabel;
  info_->setObjectName(QStringLiteral("info"));
  info_->setWordWrap(true);
  layout->addWidget(info_);
  chart_ = new QChart;
  chart_->legend()->setAlignment(Qt::AlignBottom);
  chart_->setTitle(tr("Decode-only steps: median step time by running requests"));
  layout->addWidget(chart_view(chart_, 220), 1);
  auto* fit_bar = new QHBoxLayout;
  fit_ = new QLabel;
  fit_->setObjectName(QStringLiteral("fit"));
  fit_->setWordWrap(true);
  apply_ = new QPushButton(tr("Use these host times in the serving scenario"));
  apply_->setObjectName(QStringLiteral("apply_host_time"));
  apply_->setToolTip(tr("Sets inference.engine.step_overhead_ms (a measured host time added to every step's GPU time "
                        "in place of the engine profile's host model) and, where fitted, "
                        "inference.engine.eager_host_us_per_layer"));
  apply_->setEnabled(false);
  fit_bar->addWidget(fit_, 1);
  fit_bar->addWidget(apply_);
  layout->addLayout(fit_bar);
  connect(open_, &QPushButton::clicked, this, &ServingStepsView::open_requested);
  connect(apply_, &QPushButton::clicked, this, [this] {
    if (fitted_ms_) emit apply_requested(*fitted_ms_, fitted_eager_us_.value_or(-1.0));
  });
}

void ServingStepsView::show_report(const QString& path, const nlohmann::json& report, const QString& error) {
  clear_chart(chart_);
  fitted_ms_.reset();
  fitted_eager_us_.reset();
  fit_->clear();
  apply_->setEnabled(false);
  path_->setText(path.isEmpty() ? tr("no benchmark result loaded") : QFileInfo(path).fileName());
  path_->setToolTip(path);
  error_->setText(error);
  error_->setVisible(!error.isEmpty());
  if (!error.isEmpty() || !report.is_object()) {
    info_->clear();
    return;
  }
  QString info = tr("%1 of %2 requests placed on %3 steps (%4 s)")
                     .arg(report.value("placed", 0))
                     .arg(report.value("requests", 0))
                     .arg(report.value("steps", 0))
                     .arg(report.value("steps_s", 0.0), 0, 'f', 2);
  if (report.contains("scenario")) info += tr("; model: %1").arg(QString::fromStdString(report["scenario"].get<std::string>()));
  for (const auto& n : report.value("notes", nlohmann::json::array()))
    info += QStringLiteral("\n") + tr("note: %1").arg(QString::fromStdString(n.get<std::string>()));
  info_->setText(info);

  auto* measured = new QLineSeries;
  measured->setName(kMeasured);
  measured->setPointsVisible(true);
  auto* model = new QLineSeries;
  model->setName(kModel);
  model->setPointsVisible(true);
  double x_max = 1, y_max = 1;
  for (const auto& row : report.value("decode_steps", nlohmann::json::array())) {
    const double x = row["mean_decodes"].get<double>();
    measured->append(x, row["median_ms"].get<double>());
    x_max = std::max(x_max, x);
    y_max = std::max(y_max, row["median_ms"].get<double>());
    if (row.contains("predicted_median_ms")) {
      model->append(x, row["predicted_median_ms"].get<double>());
      y_max = std::max(y_max, row["predicted_median_ms"].get<double>());
    }
  }
  auto* ax = new QValueAxis;
  ax->setTitleText(tr("running requests"));
  ax->setRange(0, x_max * 1.05);
  ax->setLabelFormat(QStringLiteral("%.0f"));
  auto* ay = new QValueAxis;
  ay->setTitleText(tr("step, ms"));
  ay->setRange(0, y_max * 1.1);
  ay->setLabelFormat(QStringLiteral("%.0f"));
  ax->applyNiceNumbers();
  ay->applyNiceNumbers();
  chart_->addAxis(ax, Qt::AlignBottom);
  chart_->addAxis(ay, Qt::AlignLeft);
  for (QLineSeries* s : {measured, model}) {
    if (s->count() == 0) {
      delete s;
      continue;
    }
    chart_->addSeries(s);
    s->attachAxis(ax);
    s->attachAxis(ay);
  }
  if (report.contains("fit") && report["fit"].is_object()) {
    const auto& f = report["fit"];
    fitted_ms_ = f["step_overhead_ms"].get<double>();
    fit_->setText(tr("Host time that fits the decode-only steps: %1 ms a step (median |error| over %2 steps %3% -> %4%)")
                      .arg(*fitted_ms_, 0, 'f', 2)
                      .arg(f["steps"].get<size_t>())
                      .arg(100 * f["median_abs_error_before"].get<double>(), 0, 'f', 1)
                      .arg(100 * f["median_abs_error_after"].get<double>(), 0, 'f', 1));
    if (f.contains("eager_host_us_per_layer")) {
      fitted_eager_us_ = f["eager_host_us_per_layer"].get<double>();
      fit_->setText(fit_->text() + QStringLiteral("\n") +
                    tr("Host time per layer that fits the prompt steps run without a CUDA graph: %1 us (median |error| "
                       "over %2 steps %3% -> %4%)")
                        .arg(*fitted_eager_us_, 0, 'f', 0)
                        .arg(f["eager_steps"].get<size_t>())
                        .arg(100 * f["eager_median_abs_error_before"].get<double>(), 0, 'f', 1)
                        .arg(100 * f["eager_median_abs_error_after"].get<double>(), 0, 'f', 1));
    }
    apply_->setEnabled(true);
  }
}

QString ServingStepsView::error() const { return error_->text(); }

QString ServingStepsView::info() const { return info_->text(); }

QString ServingStepsView::fit_text() const { return fit_->text(); }

std::vector<QPointF> ServingStepsView::points(const QString& name) const { return points_of(chart_, name); }

}  // namespace capsim::gui
