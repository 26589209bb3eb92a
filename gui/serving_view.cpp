#include "serving_view.hpp"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
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

  chart_ = new QChart;
  chart_->setTitle(tr("Latency percentiles (ms); end-to-end in the table"));
  chart_->legend()->setAlignment(Qt::AlignBottom);
  auto* view = new QChartView(chart_);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(260);
  layout->addWidget(view, 1);

  connect(run_, &QPushButton::clicked, this, &ServingView::run_requested);
  connect(cancel_, &QPushButton::clicked, this, &ServingView::cancel_requested);
  show_idle(tr("no result yet"));
}

void ServingView::clear_figures() {
  for (int r = 0; r < table_->rowCount(); ++r)
    for (int c = 0; c < table_->columnCount(); ++c) table_->setItem(r, c, nullptr);
  chart_->removeAllSeries();
  for (QAbstractAxis* a : chart_->axes()) {
    chart_->removeAxis(a);
    delete a;
  }
}

void ServingView::show_running() {
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
