#include "serving_view.hpp"

#include "chart_helpers.hpp"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QDoubleSpinBox>
#include <QGraphicsLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineSeries>
#include <QScatterSeries>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <limits>

namespace capsim::gui {

namespace {

const QStringList kColumns = {QStringLiteral("mean"), QStringLiteral("p50"), QStringLiteral("p90"),
                              QStringLiteral("p99")};
const QStringList kMetrics = {QStringLiteral("ttft"), QStringLiteral("tpot"), QStringLiteral("itl"),
                              QStringLiteral("e2e")};

QDoubleSpinBox* sla_box(const char* name, double value) {
  auto* box = new QDoubleSpinBox;
  box->setObjectName(QString::fromUtf8(name));
  box->setRange(0.1, 1e6);
  box->setDecimals(1);
  box->setSuffix(QStringLiteral(" ms"));
  box->setValue(value);
  return box;
}

}  // namespace

ServingView::ServingView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  run_ = new QPushButton(tr("Run"));
  run_->setObjectName(QStringLiteral("run"));
  run_->setShortcut(QKeySequence(Qt::Key_F5));
  run_->setToolTip(tr("Simulate the serving scenario again (F5)"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setObjectName(QStringLiteral("cancel"));
  cancel_->setEnabled(false);
  busy_ = new QProgressBar;
  busy_->setRange(0, 0);
  busy_->setVisible(false);
  busy_->setMaximumWidth(160);
  status_ = new QLabel;
  status_->setObjectName(QStringLiteral("status"));
  status_->setWordWrap(true);
  bar->addWidget(run_);
  bar->addWidget(cancel_);
  bar->addWidget(busy_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);

  table_ = new QTableWidget(static_cast<int>(kMetrics.size()), static_cast<int>(kColumns.size()));
  table_->setObjectName(QStringLiteral("latency"));
  QStringList headers;
  for (const QString& c : kColumns) headers << tr("%1 ms").arg(c);
  table_->setHorizontalHeaderLabels(headers);
  table_->setVerticalHeaderLabels({tr("TTFT"), tr("TPOT"), tr("ITL"), tr("E2E")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->setFixedHeight(table_->horizontalHeader()->sizeHint().height() +
                         4 * table_->verticalHeader()->defaultSectionSize() + 6);
  layout->addWidget(table_);
  time_ = new QLabel;
  time_->setObjectName(QStringLiteral("time_by_part"));
  time_->setWordWrap(true);
  time_->setToolTip(tr("The first run's engine time by part, summed over its iterations (capsim infer's busy_by_part)"));
  layout->addWidget(time_);

  chart_ = new QChart;
  chart_->setTitle(tr("Percentiles (ms); E2E in the table"));
  chart_->legend()->setAlignment(Qt::AlignBottom);
  auto* view = new QChartView(chart_);
  view->setRenderHint(QPainter::Antialiasing);

  // KV-cache use and the running batch over the first run's time, beside the percentiles.
  time_chart_ = new QChart;
  time_chart_->legend()->setAlignment(Qt::AlignBottom);
  // Less padding around the two side-by-side charts: they share the height with the table
  // and the QPS chart.
  for (QChart* c : {chart_, time_chart_}) {
    c->layout()->setContentsMargins(0, 0, 0, 0);
    c->setMargins(QMargins(4, 2, 4, 2));
    c->setBackgroundRoundness(0);
  }
  auto* time_view = new QChartView(time_chart_);
  time_view->setObjectName(QStringLiteral("over_time"));
  time_view->setRenderHint(QPainter::Antialiasing);
  auto* charts = new QHBoxLayout;
  charts->addWidget(view, 2);
  charts->addWidget(time_view, 3);

  // Latency against load: P99 TTFT and TPOT by arrival rate, the SLA, the highest rate in it.
  const ServingSla defaults;
  auto* qps_bar = new QHBoxLayout;
  ttft_sla_ = sla_box("sla_ttft", defaults.ttft_p99_ms);
  tpot_sla_ = sla_box("sla_tpot", defaults.tpot_p99_ms);
  qps_run_ = new QPushButton(tr("Latency vs QPS"));
  qps_run_->setObjectName(QStringLiteral("qps_run"));
  qps_run_->setToolTip(tr("Find the highest Poisson rate within the SLA (capsim infer --max-qps) and the P99 "
                          "latencies around it (F6)"));
  qps_run_->setShortcut(QKeySequence(Qt::Key_F6));
  qps_cancel_ = new QPushButton(tr("Cancel"));
  qps_cancel_->setObjectName(QStringLiteral("qps_cancel"));
  qps_cancel_->setToolTip(tr("Stop the latency-vs-QPS run"));
  qps_cancel_->setEnabled(false);
  qps_bar->addWidget(new QLabel(tr("SLA: TTFT p99")));
  qps_bar->addWidget(ttft_sla_);
  qps_bar->addWidget(new QLabel(tr("TPOT p99")));
  qps_bar->addWidget(tpot_sla_);
  qps_bar->addWidget(qps_run_);
  qps_bar->addWidget(qps_cancel_);
  qps_bar->addStretch(1);
  qps_chart_ = new QChart;
  qps_chart_->setTitle(tr("P99 latency against arrival rate"));
  qps_chart_->legend()->setAlignment(Qt::AlignBottom);
  auto* qps_view = new QChartView(qps_chart_);
  qps_view->setRenderHint(QPainter::Antialiasing);
  // Both charts and the table fit an 800-pixel-high window.
  view->setMinimumHeight(180);
  qps_view->setMinimumHeight(220);
  time_view->setMinimumHeight(180);
  layout->addLayout(charts, 4);
  layout->addLayout(qps_bar);
  layout->addWidget(qps_view, 5);
  qps_status_ = new QLabel;
  qps_status_->setObjectName(QStringLiteral("qps_status"));
  qps_status_->setWordWrap(true);
  layout->addWidget(qps_status_);

  connect(run_, &QPushButton::clicked, this, &ServingView::run_requested);
  connect(cancel_, &QPushButton::clicked, this, &ServingView::cancel_requested);
  connect(qps_run_, &QPushButton::clicked, this, &ServingView::qps_requested);
  connect(qps_cancel_, &QPushButton::clicked, this, &ServingView::qps_cancel_requested);
  show_idle(tr("no result yet"));
  show_qps_idle(tr("Press Latency vs QPS (F6) to find the highest rate within the SLA."));
}

void ServingView::clear_figures() {
  for (int r = 0; r < table_->rowCount(); ++r)
    for (int c = 0; c < table_->columnCount(); ++c) table_->setItem(r, c, nullptr);
  clear_chart(chart_);
  clear_over_time();
  time_->clear();
}

void ServingView::clear_over_time() {
  clear_chart(time_chart_);
  over_time_ = ServingOverTime{};
  time_chart_->setTitle(tr("KV-cache use and running batch over time"));
}

void ServingView::show_over_time(const ServingOverTime& t) {
  clear_over_time();
  over_time_ = t;
  if (t.start_s.empty()) return;
  auto* kv = new QLineSeries;
  kv->setName(tr("KV cache (%)"));
  kv->setObjectName(QStringLiteral("KV cache"));
  auto* batch = new QLineSeries;
  batch->setName(tr("batch (decodes)"));
  batch->setObjectName(QStringLiteral("batch"));
  QList<QPointF> kv_points, batch_points;
  double batch_top = 1, kv_top = 0;
  for (size_t i = 0; i < t.start_s.size(); ++i) {
    kv_points.append({t.start_s[i], t.kv_percent[i]});
    batch_points.append({t.start_s[i], t.batch[i]});
    batch_top = std::max(batch_top, t.batch[i]);
    kv_top = std::max(kv_top, t.kv_percent[i]);
  }
  kv->replace(kv_points);
  batch->replace(batch_points);
  auto* x = new QValueAxis;
  QString x_title = tr("time (s)");
  if (t.replicas > 1) x_title += tr(", replica %1 of %2").arg(t.replica + 1).arg(t.replicas);
  if (t.start_s.size() < t.iterations)
    x_title += tr("; peaks of %1 iterations").arg(t.iterations);
  x->setTitleText(x_title);
  x->setRange(t.start_s.front(), std::max(t.start_s.back(), t.start_s.front() + 1e-9));
  x->setLabelFormat(QStringLiteral("%.3g"));
  auto* y_kv = new QValueAxis;
  y_kv->setTitleText(tr("KV %"));
  // Up to the peak (a light load uses a sliver of the cache), at most 100.
  if (kv_top * 1.1 >= 90) {
    y_kv->setRange(0, 100);
  } else {
    y_kv->setRange(0, std::max(kv_top * 1.1, 1.0));
    y_kv->applyNiceNumbers();
  }
  y_kv->setLabelFormat(QStringLiteral("%.3g"));
  auto* y_batch = new QValueAxis;
  y_batch->setTitleText(tr("batch"));
  y_batch->setRange(0, batch_top * 1.1);
  y_batch->applyNiceNumbers();
  y_batch->setLabelFormat(QStringLiteral("%.0f"));
  y_batch->setGridLineVisible(false);  // the left axis' grid only
  time_chart_->addAxis(x, Qt::AlignBottom);
  time_chart_->addAxis(y_kv, Qt::AlignLeft);
  time_chart_->addAxis(y_batch, Qt::AlignRight);
  // The batch wide underneath, the KV cache thin on top: where the two coincide both show.
  for (QLineSeries* line : {batch, kv}) {
    time_chart_->addSeries(line);
    QPen pen = line->pen();
    pen.setWidthF(line == batch ? 3.5 : 1.5);
    line->setPen(pen);
    line->attachAxis(x);
    line->attachAxis(line == kv ? y_kv : y_batch);
    connect(line, &QLineSeries::hovered, this, [this](const QPointF& p, bool state) {
      if (state)
        QToolTip::showText(QCursor::pos(), over_time_hover(p.x()));
      else
        QToolTip::hideText();
    });
  }
  time_chart_->setTitle(tr("KV-cache use and running batch, first run"));
}

std::vector<QPointF> ServingView::over_time_points(const QString& name) const {
  std::vector<QPointF> out;
  for (QAbstractSeries* s : time_chart_->series())
    if (auto* line = qobject_cast<QLineSeries*>(s); line && line->objectName() == name)
      for (const QPointF& p : line->points()) out.push_back(p);
  return out;
}

QString ServingView::over_time_hover(double seconds) const {
  const std::vector<double>& t = over_time_.start_s;
  if (t.empty()) return {};
  // The nearest point at or around `seconds`.
  auto it = std::lower_bound(t.begin(), t.end(), seconds);
  size_t i = static_cast<size_t>(it - t.begin());
  if (i == t.size() || (i > 0 && seconds - t[i - 1] < t[i] - seconds)) i = i > 0 ? i - 1 : 0;
  return tr("t = %1 s\nKV cache %2%\nbatch %3 decodes")
      .arg(t[i], 0, 'f', 3)
      .arg(over_time_.kv_percent[i], 0, 'f', 1)
      .arg(over_time_.batch[i]);
}

void ServingView::show_running() {
  clear_over_time();  // the timeline is of the document before the edit
  busy_->setVisible(true);
  cancel_->setEnabled(true);
  table_->setEnabled(false);
  status_->setText(tr("Simulating ..."));
}

void ServingView::show_idle(const QString& why) {
  busy_->setVisible(false);
  cancel_->setEnabled(false);
  table_->setEnabled(true);
  clear_figures();
  status_->setText(why);
}

void ServingView::show_outcome(const ServingOutcome& outcome) {
  busy_->setVisible(false);
  cancel_->setEnabled(false);
  table_->setEnabled(true);
  clear_figures();
  if (!outcome.internal_error.empty()) {
    status_->setText(tr("Internal error: %1").arg(QString::fromStdString(outcome.internal_error)));
    return;
  }
  if (!outcome.does_not_fit.empty()) {
    status_->setText(tr("Does not fit: %1").arg(QString::fromStdString(outcome.does_not_fit)));
    return;
  }
  std::vector<QBarSet*> sets;
  auto* series = new QBarSeries;
  for (const QString& c : {QStringLiteral("p50"), QStringLiteral("p90"), QStringLiteral("p99")}) {
    sets.push_back(new QBarSet(c));
    series->append(sets.back());
  }
  double top = 0;
  for (size_t r = 0; r < outcome.latency.size(); ++r) {
    const LatencyRow& row = outcome.latency[r];
    const double values[] = {row.mean_ms, row.p50_ms, row.p90_ms, row.p99_ms};
    for (int c = 0; c < 4; ++c) {
      auto* item = new QTableWidgetItem(QString::number(values[c], 'f', 2));
      item->setData(Qt::UserRole, values[c]);
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      table_->setItem(static_cast<int>(r), c, item);
    }
    if (row.metric == "e2e") continue;  // seconds beside milliseconds would flatten the rest: table only
    sets[0]->append(row.p50_ms);
    sets[1]->append(row.p90_ms);
    sets[2]->append(row.p99_ms);
    top = std::max(top, row.p99_ms);
  }
  show_over_time(outcome.over_time);
  chart_->addSeries(series);
  auto* x = new QBarCategoryAxis;
  x->append({tr("TTFT"), tr("TPOT"), tr("ITL")});
  auto* y = new QValueAxis;
  y->setTitleText(tr("ms"));
  y->setRange(0, top > 0 ? top * 1.1 : 1);
  chart_->addAxis(x, Qt::AlignBottom);
  chart_->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  status_->setText(tr("%1 output tokens/s, %2 requests/s")
                       .arg(outcome.throughput_tokens_per_s, 0, 'f', 1)
                       .arg(outcome.requests_per_s, 0, 'f', 3));
  QStringList shares;
  for (const auto& [part, share] : outcome.time_shares)
    if (share >= 0.005) shares << tr("%1 %2%").arg(part_label(part)).arg(100.0 * share, 0, 'f', 1);
  time_->setText(shares.isEmpty() ? QString() : tr("Engine time: %1").arg(shares.join(QStringLiteral(", "))));
}

QString ServingView::time_by_part() const { return time_->text(); }

QString ServingView::part_label(const std::string& part) {
  static const std::pair<const char*, const char*> labels[] = {
      {"attention_projections", QT_TR_NOOP("attention projections")},
      {"attention_kernels", QT_TR_NOOP("attention kernels")},
      {"elementwise", QT_TR_NOOP("norms, rotary, KV write")},
      {"tp_all_reduce", QT_TR_NOOP("TP all-reduce")},
      {"dense_mlp", QT_TR_NOOP("MLP")},
      {"router", QT_TR_NOOP("router")},
      {"expert_exchange", QT_TR_NOOP("expert exchange")},
      {"routed_experts", QT_TR_NOOP("routed experts")},
      {"shared_experts", QT_TR_NOOP("shared experts")},
      {"head", QT_TR_NOOP("output head")},
      {"kernel_gaps", QT_TR_NOOP("kernel gaps")},
      {"eager_host", QT_TR_NOOP("eager host")},
      {"host", QT_TR_NOOP("scheduling")},
      {"drafts", QT_TR_NOOP("drafts")},
      {"swaps", QT_TR_NOOP("swap waits")}};
  for (const auto& [name, label] : labels)
    if (part == name) return tr(label);
  return QString::fromStdString(part);
}

ServingSla ServingView::sla() const {
  ServingSla sla;
  sla.ttft_p99_ms = ttft_sla_->value();
  sla.tpot_p99_ms = tpot_sla_->value();
  return sla;
}

void ServingView::set_sla(const ServingSla& sla) {
  ttft_sla_->setValue(sla.ttft_p99_ms);
  tpot_sla_->setValue(sla.tpot_p99_ms);
}

void ServingView::show_qps_running() {
  qps_run_->setEnabled(false);
  qps_cancel_->setEnabled(true);
  clear_chart(qps_chart_);
  qps_status_->setText(tr("Searching for the highest rate within the SLA ..."));
}

void ServingView::show_qps_progress(qint64 done, qint64 total) {
  if (!qps_running()) return;
  qps_status_->setText(total > 0 ? tr("Searching for the highest rate within the SLA: probe %1 of about %2 ...")
                                       .arg(std::min(done + 1, total))
                                       .arg(total)
                                 : tr("Searching for the highest rate within the SLA ..."));
}

void ServingView::show_qps_idle(const QString& why) {
  qps_run_->setEnabled(true);
  qps_cancel_->setEnabled(false);
  clear_chart(qps_chart_);
  qps_status_->setText(why);
}

void ServingView::show_qps(const QpsCurve& curve) {
  qps_run_->setEnabled(true);
  qps_cancel_->setEnabled(false);
  clear_chart(qps_chart_);
  if (!curve.internal_error.empty()) {
    qps_status_->setText(tr("Internal error: %1").arg(QString::fromStdString(curve.internal_error)));
    return;
  }
  if (!curve.does_not_fit.empty()) {
    qps_status_->setText(tr("Does not fit: %1").arg(QString::fromStdString(curve.does_not_fit)));
    return;
  }
  auto* ttft = new QLineSeries;
  ttft->setName(tr("TTFT p99"));
  ttft->setPointsVisible(true);
  auto* tpot = new QLineSeries;
  tpot->setName(tr("TPOT p99"));
  tpot->setPointsVisible(true);
  double x_max = 0, ttft_top = curve.sla.ttft_p99_ms, tpot_top = curve.sla.tpot_p99_ms;
  for (const QpsPoint& p : curve.points) {
    ttft->append(p.qps, p.ttft_p99_ms);
    tpot->append(p.qps, p.tpot_p99_ms);
    x_max = std::max(x_max, p.qps);
    ttft_top = std::max(ttft_top, p.ttft_p99_ms);
    tpot_top = std::max(tpot_top, p.tpot_p99_ms);
  }
  auto dashed = [](QLineSeries* line, const QColor& colour, const QString& name) {
    QPen pen(colour);
    pen.setWidth(2);
    pen.setStyle(Qt::DashLine);
    line->setPen(pen);
    line->setName(name);
  };
  auto* ttft_sla = new QLineSeries;
  dashed(ttft_sla, Qt::gray, tr("TTFT SLA %1 ms").arg(curve.sla.ttft_p99_ms));
  auto* tpot_sla = new QLineSeries;
  dashed(tpot_sla, Qt::gray, tr("TPOT SLA %1 ms").arg(curve.sla.tpot_p99_ms));
  ttft_sla->append(0, curve.sla.ttft_p99_ms);
  ttft_sla->append(x_max, curve.sla.ttft_p99_ms);
  tpot_sla->append(0, curve.sla.tpot_p99_ms);
  tpot_sla->append(x_max, curve.sla.tpot_p99_ms);
  ttft_sla->setObjectName(QStringLiteral("TTFT SLA"));
  tpot_sla->setObjectName(QStringLiteral("TPOT SLA"));
  auto* marker = new QLineSeries;
  marker->setObjectName(QStringLiteral("max QPS"));
  QPen red(Qt::red);
  red.setWidth(2);
  marker->setPen(red);
  marker->setName(tr("max QPS %1").arg(curve.max_qps, 0, 'f', 3));
  auto* x = new QValueAxis;
  x->setTitleText(tr("arrival rate (requests/s)"));
  x->setRange(0, x_max > 0 ? x_max * 1.05 : 1);
  auto* y_ttft = new QValueAxis;
  y_ttft->setTitleText(tr("TTFT p99 (ms)"));
  y_ttft->setRange(0, ttft_top * 1.1);
  auto* y_tpot = new QValueAxis;
  y_tpot->setTitleText(tr("TPOT p99 (ms)"));
  y_tpot->setRange(0, tpot_top * 1.1);
  x->applyNiceNumbers();
  y_ttft->applyNiceNumbers();
  y_tpot->applyNiceNumbers();
  y_tpot->setGridLineVisible(false);  // the left axis' grid only: two grids would not line up
  marker->append(curve.max_qps, 0);
  marker->append(curve.max_qps, y_ttft->max());
  qps_chart_->addAxis(x, Qt::AlignBottom);
  qps_chart_->addAxis(y_ttft, Qt::AlignLeft);
  qps_chart_->addAxis(y_tpot, Qt::AlignRight);
  for (QLineSeries* line : {ttft, ttft_sla, marker, tpot, tpot_sla}) {
    qps_chart_->addSeries(line);
    line->attachAxis(x);
    line->attachAxis(line == tpot || line == tpot_sla ? y_tpot : y_ttft);
  }
  // The SLA lines share their curve's colour, dashed.
  QPen ttft_pen = ttft_sla->pen();
  ttft_pen.setColor(ttft->color());
  ttft_sla->setPen(ttft_pen);
  QPen tpot_pen = tpot_sla->pen();
  tpot_pen.setColor(tpot->color());
  tpot_sla->setPen(tpot_pen);
  if (curve.max_qps > 0)
    qps_status_->setText(tr("Max QPS %1 requests/s within TTFT p99 <= %2 ms and TPOT p99 <= %3 ms (Poisson arrivals).")
                             .arg(curve.max_qps, 0, 'f', 3)
                             .arg(curve.sla.ttft_p99_ms)
                             .arg(curve.sla.tpot_p99_ms));
  else
    qps_status_->setText(tr("No arrival rate meets TTFT p99 <= %1 ms and TPOT p99 <= %2 ms.")
                             .arg(curve.sla.ttft_p99_ms)
                             .arg(curve.sla.tpot_p99_ms));
}

std::vector<QPointF> ServingView::qps_points(const QString& name) const {
  std::vector<QPointF> out;
  for (QAbstractSeries* s : qps_chart_->series())
    if (auto* line = qobject_cast<QLineSeries*>(s); line && (line->objectName() == name || line->name() == name))
      for (const QPointF& p : line->points()) out.push_back(p);
  return out;
}

QStringList ServingView::qps_series() const {
  QStringList out;
  for (QAbstractSeries* s : qps_chart_->series()) out << s->name();
  return out;
}

QString ServingView::qps_status() const {
  return qps_status_->text();
}

bool ServingView::qps_running() const {
  return !qps_run_->isEnabled();
}

void ServingView::click_qps_cancel() {
  qps_cancel_->click();
}

double ServingView::cell(const QString& metric, const QString& column) const {
  const auto r = kMetrics.indexOf(metric), c = kColumns.indexOf(column);
  const QTableWidgetItem* item = (r < 0 || c < 0) ? nullptr : table_->item(static_cast<int>(r), static_cast<int>(c));
  return item ? item->data(Qt::UserRole).toDouble() : std::numeric_limits<double>::quiet_NaN();
}

QString ServingView::status() const {
  return status_->text();
}

bool ServingView::running() const {
  return cancel_->isEnabled();
}

}  // namespace capsim::gui
