#include "search_view.hpp"

#include <QChart>
#include <QChartView>
#include <QComboBox>
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
#include <cmath>
#include <nlohmann/json.hpp>

#include "capsim/core/units.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"

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

/// $/GPU-hour for the scenario's GPU: the scenario's training.usd_per_gpu_hour, else the
/// default of data/prices.json (as `capsim plan` uses it); 0 when neither has one.
std::pair<double, QString> gpu_price(const Scenario& s) {
  if (s.training && s.training->budget.usd_per_gpu_hour > 0)
    return {s.training->budget.usd_per_gpu_hour, QStringLiteral("training.usd_per_gpu_hour")};
  try {
    const nlohmann::json d = io::read_json_file(io::data_dir() / "prices.json");
    const nlohmann::json& p = d.at("prices").at(s.system.gpu.id);
    return {p.at("usd_per_gpu_hour").get<double>(), QStringLiteral("data/prices.json")};
  } catch (const std::exception&) {
    return {0.0, QString()};
  }
}

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
  x_axis_ = new QComboBox;
  x_axis_->setObjectName(QStringLiteral("search_x_axis"));
  x_axis_->addItem(tr("against GPUs"), QStringLiteral("gpus"));
  x_axis_->addItem(tr("against $ / M tokens"), QStringLiteral("cost"));
  x_axis_->setToolTip(tr("The scatter's horizontal axis: the cluster size, or the cost of a million tokens at the "
                         "GPU's $/GPU-hour (training.usd_per_gpu_hour, else data/prices.json)"));
  bar->addWidget(x_axis_);
  bar->addWidget(busy_);
  bar->addStretch(1);
  layout->addLayout(bar);
  layout->addWidget(status_);  // a line of its own: the counts need the width

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
  connect(x_axis_, &QComboBox::currentIndexChanged, this, [this] { draw_scatter(); });
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
  pareto_.clear();
}

void SearchView::show_running() {
  clear_figures();
  busy_->setRange(0, 0);
  busy_->setVisible(true);
  cancel_->setEnabled(true);
  run_->setEnabled(false);
  status_->setText(tr("Searching ..."));
}

void SearchView::show_progress(qint64 done, qint64 total) {
  if (!running()) return;
  if (total <= 0) {
    busy_->setRange(0, 0);
    status_->setText(tr("Searching: enumerating layouts ..."));
    return;
  }
  busy_->setRange(0, 1000);
  busy_->setValue(static_cast<int>(std::clamp(1000 * done / total, qint64{0}, qint64{1000})));
  status_->setText(tr("Searching: %1 of %2 layouts costed").arg(done).arg(total));
}

double SearchView::progress() const {
  if (!running() || busy_->maximum() == 0) return -1;
  return static_cast<double>(busy_->value()) / busy_->maximum();
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
  pareto_ = r.pareto;
  std::tie(price_, price_source_) = gpu_price(out.scenario);
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

  draw_scatter();
}

double SearchView::x_of(const SearchCandidate& c) const {
  if (x_axis_->currentData().toString() == QStringLiteral("gpus")) return static_cast<double>(c.num_gpus);
  if (price_ <= 0 || c.tokens_per_s <= 0) return std::nan("");
  return static_cast<double>(c.num_gpus) * price_ / 3600.0 / c.tokens_per_s * 1e6;
}

void SearchView::draw_scatter() {
  chart_->removeAllSeries();
  for (QAbstractAxis* a : chart_->axes()) {
    chart_->removeAxis(a);
    delete a;
  }
  if (candidates_.empty()) return;
  const bool cost = x_axis_->currentData().toString() == QStringLiteral("cost");
  chart_->setTitle(cost ? tr("Tokens/s against cost") : tr("Tokens/s against GPUs"));
  if (cost && price_ <= 0) {
    chart_->setTitle(tr("No $/GPU-hour for this GPU: set training.usd_per_gpu_hour ($/GPU-hour in the editor)"));
    return;
  }
  // The listed layouts, and the Pareto front of what is plotted: the layouts no other beats
  // on both axes (fewer GPUs or less cost, and more tokens/s). The library's front (GPUs,
  // tokens/s, memory headroom) joins the candidates.
  std::vector<const SearchCandidate*> all;
  for (const SearchCandidate& c : candidates_) all.push_back(&c);
  for (const SearchCandidate& c : pareto_)
    if (std::find(candidates_.begin(), candidates_.end(), c) == candidates_.end()) all.push_back(&c);
  auto* top = new QScatterSeries;
  top->setName(tr("best layouts"));
  top->setMarkerSize(10);
  top->setColor(QColor(0x4e, 0x79, 0xa7));
  auto* front = new QScatterSeries;
  front->setName(tr("Pareto front"));
  front->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  front->setMarkerSize(14);
  front->setColor(QColor(0xe1, 0x57, 0x59, 160));
  front->setBorderColor(QColor(0xa0, 0x20, 0x20));
  double max_x = 0, max_y = 1;
  for (const SearchCandidate& c : candidates_) top->append(x_of(c), c.tokens_per_s);
  std::vector<const SearchCandidate*> on_front;
  for (const SearchCandidate* a : all) {
    const double ax = x_of(*a), ay = a->tokens_per_s;
    const bool beaten = std::any_of(all.begin(), all.end(), [&](const SearchCandidate* b) {
      const double bx = x_of(*b), by = b->tokens_per_s;
      return bx <= ax && by >= ay && (bx < ax || by > ay);
    });
    max_x = std::max(max_x, ax);
    max_y = std::max(max_y, ay);
    if (!beaten) on_front.push_back(a);
  }
  std::sort(on_front.begin(), on_front.end(),
            [&](const SearchCandidate* a, const SearchCandidate* b) { return x_of(*a) < x_of(*b); });
  for (const SearchCandidate* c : on_front) front->append(x_of(*c), c->tokens_per_s);
  front_.clear();
  for (const SearchCandidate* c : on_front) front_.push_back(*c);
  chart_->addSeries(front);
  chart_->addSeries(top);
  auto* x = new QValueAxis;
  x->setTitleText(cost ? tr("$ per million tokens (%1 $/GPU-hour, %2)").arg(price_).arg(price_source_) : tr("GPUs"));
  x->setRange(0, std::max(max_x, 1e-9) * 1.1);
  x->applyNiceNumbers();
  x->setLabelFormat(cost ? QStringLiteral("%.3g") : QStringLiteral("%d"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("tokens/s"));
  y->setRange(0, max_y * 1.1);
  y->applyNiceNumbers();
  y->setLabelFormat(QStringLiteral("%.0f"));
  chart_->addAxis(x, Qt::AlignBottom);
  chart_->addAxis(y, Qt::AlignLeft);
  for (QScatterSeries* s : {top, front}) {
    s->attachAxis(x);
    s->attachAxis(y);
    // A click on a point loads that layout.
    connect(s, &QScatterSeries::clicked, this, [this](const QPointF& p) { click_point(p); });
  }
}

void SearchView::set_x_axis(const QString& key) {
  const int i = x_axis_->findData(key);
  if (i >= 0) x_axis_->setCurrentIndex(i);
}

double SearchView::price() const {
  return price_;
}

std::vector<QPointF> SearchView::pareto_points() const {
  std::vector<QPointF> out;
  for (const SearchCandidate& c : front_) out.emplace_back(x_of(c), c.tokens_per_s);
  return out;
}

bool SearchView::click_point(const QPointF& p) {
  // The plotted layout nearest the point, in the axes' proportions.
  const SearchCandidate* best = nullptr;
  double best_d = 0, max_x = 1e-12, max_y = 1e-12;
  std::vector<const SearchCandidate*> all;
  for (const SearchCandidate& c : candidates_) all.push_back(&c);
  for (const SearchCandidate& c : front_) all.push_back(&c);
  for (const SearchCandidate* c : all) {
    max_x = std::max(max_x, std::abs(x_of(*c)));
    max_y = std::max(max_y, c->tokens_per_s);
  }
  for (const SearchCandidate* c : all) {
    const double dx = (x_of(*c) - p.x()) / max_x, dy = (c->tokens_per_s - p.y()) / max_y;
    const double d = dx * dx + dy * dy;
    if (std::isfinite(d) && (!best || d < best_d)) {
      best = c;
      best_d = d;
    }
  }
  if (!best) return false;
  for (int row = 0; row < table_->rowCount(); ++row)
    if (candidate(row) == *best) table_->selectRow(row);
  emit layout_chosen(*best);
  return true;
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
