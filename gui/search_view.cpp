#include "search_view.hpp"

#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QScatterSeries>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>

#include "capsim/core/units.hpp"

namespace capsim::gui {

namespace {

const QStringList kHeaders = {QStringLiteral("rank"),     QStringLiteral("GPUs"),      QStringLiteral("tp"),
                              QStringLiteral("pp"),       QStringLiteral("vpp"),       QStringLiteral("dp"),
                              QStringLiteral("cp"),       QStringLiteral("ep"),        QStringLiteral("zero"),
                              QStringLiteral("mb"),       QStringLiteral("recompute"), QStringLiteral("schedule"),
                              QStringLiteral("step s"),   QStringLiteral("tokens/s"),  QStringLiteral("MFU %"),
                              QStringLiteral("memory GiB")};
constexpr int kIndexRole = Qt::UserRole;
constexpr int kSortRole = Qt::UserRole + 1;

/// A cell that sorts by its number, not its text.
class Cell : public QTableWidgetItem {
 public:
  Cell(const QString& text, double value) : QTableWidgetItem(text) {
    setData(kSortRole, value);
    setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  }
  explicit Cell(const QString& text) : QTableWidgetItem(text) {}
  bool operator<(const QTableWidgetItem& other) const override {
    const QVariant a = data(kSortRole), b = other.data(kSortRole);
    if (a.isValid() && b.isValid()) return a.toDouble() < b.toDouble();
    return QTableWidgetItem::operator<(other);
  }
};

}  // namespace

SearchView::SearchView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  run_ = new QPushButton(tr("Search layouts"));
  run_->setObjectName(QStringLiteral("run_search"));
  run_->setToolTip(tr("Every layout of the training scenario's model, GPU and batch, ranked by step time"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setObjectName(QStringLiteral("cancel_search"));
  cancel_->setEnabled(false);
  gpus_ = new QLineEdit;
  gpus_->setObjectName(QStringLiteral("search_gpus"));
  gpus_->setPlaceholderText(tr("the scenario's"));
  gpus_->setToolTip(tr("GPU counts to try, separated by commas"));
  gpus_->setMaximumWidth(140);
  top_ = new QSpinBox;
  top_->setObjectName(QStringLiteral("search_top"));
  top_->setRange(1, 200);
  top_->setValue(10);
  busy_ = new QProgressBar;
  busy_->setRange(0, 0);
  busy_->setVisible(false);
  busy_->setMaximumWidth(120);
  status_ = new QLabel(tr("Search the layouts of the training scenario."));
  status_->setObjectName(QStringLiteral("search_status"));
  status_->setWordWrap(true);
  bar->addWidget(run_);
  bar->addWidget(cancel_);
  bar->addWidget(new QLabel(tr("GPUs")));
  bar->addWidget(gpus_);
  bar->addWidget(new QLabel(tr("top")));
  bar->addWidget(top_);
  bar->addWidget(busy_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);

  chart_ = new QChart;
  chart_->setTitle(tr("Tokens/s against GPUs"));
  // The legend on the right and thin margins leave the plot its height in an 800-pixel window
  // (a bottom legend, the title and the axis titles took most of it).
  chart_->legend()->setAlignment(Qt::AlignRight);
  chart_->setMargins(QMargins(4, 4, 4, 4));
  auto* view = new QChartView(chart_);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(300);

  table_ = new QTableWidget(0, static_cast<int>(kHeaders.size()));
  table_->setObjectName(QStringLiteral("search_table"));
  table_->setHorizontalHeaderLabels(kHeaders);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->setVisible(false);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->setSortingEnabled(true);
  table_->setToolTip(tr("Click a row to use its layout in the Training tab"));

  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(table_);
  split->addWidget(view);
  split->setChildrenCollapsible(false);
  table_->setMinimumHeight(150);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  layout->addWidget(split, 1);

  connect(run_, &QPushButton::clicked, this, &SearchView::run_requested);
  connect(cancel_, &QPushButton::clicked, this, &SearchView::cancel_requested);
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int) { click_row(row); });
}

std::vector<int64_t> SearchView::gpu_counts() const {
  std::vector<int64_t> out;
  for (const QString& w : gpus_->text().split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts)) {
    bool ok = false;
    const qlonglong n = w.toLongLong(&ok);
    if (ok && n > 0) out.push_back(n);
  }
  return out;
}

void SearchView::set_gpu_counts(const QString& text) {
  gpus_->setText(text);
}

size_t SearchView::top() const {
  return static_cast<size_t>(top_->value());
}

void SearchView::clear_figures() {
  table_->setSortingEnabled(false);
  table_->setRowCount(0);
  table_->setSortingEnabled(true);
  chart_->removeAllSeries();
  for (QAbstractAxis* a : chart_->axes()) {
    chart_->removeAxis(a);
    delete a;
  }
  candidates_.clear();
}

void SearchView::show_running() {
  clear_figures();
  busy_->setVisible(true);
  cancel_->setEnabled(true);
  run_->setEnabled(false);
  status_->setText(tr("Searching ..."));
}

void SearchView::show_idle(const QString& why) {
  clear_figures();
  busy_->setVisible(false);
  cancel_->setEnabled(false);
  run_->setEnabled(true);
  status_->setText(why);
}

bool SearchView::running() const {
  return !busy_->isHidden();
}

QString SearchView::status() const {
  return status_->text();
}

void SearchView::show_outcome(const SearchOutcome& out) {
  show_idle(QString());
  if (!out.ok()) {
    status_->setText(out.cancelled ? tr("Cancelled; press Search to run again.")
                     : out.internal_error.empty()
                         ? tr("No result: the training input has problems (listed under the editor).")
                         : tr("Internal error: %1").arg(QString::fromStdString(out.internal_error)));
    return;
  }
  const SearchResult& r = out.result;
  candidates_ = r.top;
  status_->setText(tr("%1 layouts enumerated, %2 pruned by divisibility, %3 by memory, %4 costed, %5 fit; "
                      "the best %6 by step time")
                       .arg(r.enumerated)
                       .arg(r.pruned_divisibility)
                       .arg(r.pruned_memory)
                       .arg(r.evaluated)
                       .arg(r.feasible)
                       .arg(r.top.size()));
  table_->setSortingEnabled(false);
  table_->setRowCount(static_cast<int>(candidates_.size()));
  for (int i = 0; i < static_cast<int>(candidates_.size()); ++i) {
    const SearchCandidate& c = candidates_[static_cast<size_t>(i)];
    const TrainingPlan& t = c.plan;
    auto num = [](double v) { return QString::number(v); };
    const std::vector<std::pair<QString, double>> cells = {
        {num(i + 1), static_cast<double>(i + 1)},
        {num(static_cast<double>(c.num_gpus)), static_cast<double>(c.num_gpus)},
        {num(static_cast<double>(t.tp)), static_cast<double>(t.tp)},
        {num(static_cast<double>(t.pp)), static_cast<double>(t.pp)},
        {num(static_cast<double>(t.vpp.value_or(1))), static_cast<double>(t.vpp.value_or(1))},
        {num(static_cast<double>(t.dp)), static_cast<double>(t.dp)},
        {num(static_cast<double>(t.cp)), static_cast<double>(t.cp)},
        {num(static_cast<double>(t.ep)), static_cast<double>(t.ep)},
        {num(t.zero.value_or(0)), static_cast<double>(t.zero.value_or(0))},
        {num(static_cast<double>(t.micro_batch.value_or(1))), static_cast<double>(t.micro_batch.value_or(1))}};
    for (int col = 0; col < static_cast<int>(cells.size()); ++col)
      table_->setItem(i, col, new Cell(cells[static_cast<size_t>(col)].first, cells[static_cast<size_t>(col)].second));
    table_->setItem(i, 10, new Cell(QString::fromUtf8(to_string(t.recompute.value_or(Recompute::none)).data())));
    table_->setItem(i, 11, new Cell(QString::fromUtf8(to_string(t.schedule).data())));
    table_->setItem(i, 12, new Cell(QString::number(c.step_s, 'f', 3), c.step_s));
    table_->setItem(i, 13, new Cell(QString::number(c.tokens_per_s, 'f', 0), c.tokens_per_s));
    table_->setItem(i, 14, new Cell(QString::number(100 * c.mfu, 'f', 1), c.mfu));
    table_->setItem(i, 15, new Cell(QString::number(c.peak_memory_bytes / kGiB, 'f', 1), c.peak_memory_bytes));
    table_->item(i, 0)->setData(kIndexRole, i);
  }
  table_->setSortingEnabled(true);
  table_->sortByColumn(0, Qt::AscendingOrder);

  // Scatter: the listed layouts, and the Pareto front (GPUs, tokens/s, memory headroom).
  auto* top = new QScatterSeries;
  top->setName(tr("best layouts"));
  top->setMarkerSize(10);
  auto* pareto = new QScatterSeries;
  pareto->setName(tr("Pareto front"));
  pareto->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  pareto->setMarkerSize(7);
  double max_gpus = 1, max_tps = 1;
  for (const SearchCandidate& c : r.top) {
    top->append(static_cast<double>(c.num_gpus), c.tokens_per_s);
    max_gpus = std::max(max_gpus, static_cast<double>(c.num_gpus));
    max_tps = std::max(max_tps, c.tokens_per_s);
  }
  for (const SearchCandidate& c : r.pareto) {
    pareto->append(static_cast<double>(c.num_gpus), c.tokens_per_s);
    max_gpus = std::max(max_gpus, static_cast<double>(c.num_gpus));
    max_tps = std::max(max_tps, c.tokens_per_s);
  }
  chart_->addSeries(pareto);
  chart_->addSeries(top);
  auto* x = new QValueAxis;
  x->setTitleText(tr("GPUs"));
  x->setRange(0, max_gpus * 1.1);
  x->applyNiceNumbers();
  x->setLabelFormat(QStringLiteral("%d"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("tokens/s"));
  y->setRange(0, max_tps * 1.1);
  y->applyNiceNumbers();
  y->setLabelFormat(QStringLiteral("%.0f"));
  chart_->addAxis(x, Qt::AlignBottom);
  chart_->addAxis(y, Qt::AlignLeft);
  for (QScatterSeries* s : {top, pareto}) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

int SearchView::rows() const {
  return table_->rowCount();
}

const SearchCandidate& SearchView::candidate(int row) const {
  return candidates_.at(static_cast<size_t>(table_->item(row, 0)->data(kIndexRole).toInt()));
}

int SearchView::column(const QString& header) const {
  return static_cast<int>(kHeaders.indexOf(header));
}

QString SearchView::cell(int row, const QString& header) const {
  const QTableWidgetItem* item = table_->item(row, column(header));
  return item ? item->text() : QString();
}

void SearchView::sort_by(const QString& header, Qt::SortOrder order) {
  table_->sortByColumn(column(header), order);
}

std::vector<QPointF> SearchView::points() const {
  std::vector<QPointF> out;
  for (QAbstractSeries* s : chart_->series())
    if (auto* scatter = qobject_cast<QScatterSeries*>(s); scatter && scatter->name() == tr("best layouts"))
      for (int i = 0; i < scatter->count(); ++i) out.push_back(scatter->at(i));
  return out;
}

void SearchView::click_row(int row) {
  if (row < 0 || row >= table_->rowCount()) return;
  table_->selectRow(row);
  emit layout_chosen(candidate(row));
}

}  // namespace capsim::gui
