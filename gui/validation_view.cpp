#include "validation_view.hpp"

#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QProgressBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QSplitter>
#include <QTreeWidget>
#include <QTreeWidgetItemIterator>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "capsim/io/presets.hpp"

namespace capsim::gui {

namespace {

enum Column { kName, kN, kMedian, kP90, kSigned, kErrors };
/// Item data: the row's kind and its exact numbers.
constexpr int kKindRole = Qt::UserRole;
constexpr int kGroupRole = Qt::UserRole + 1;
constexpr int kMetricRole = Qt::UserRole + 2;
constexpr int kValueRole = Qt::UserRole + 3;
enum RowKind { kGroupRow = 1, kMetricRow = 2, kCaseRow = 3 };

QString pct(double v, bool sign = false) {
  return QStringLiteral("%1%2 %").arg(sign && v >= 0 ? QStringLiteral("+") : QString()).arg(100 * v, 0, 'f', 1);
}

void set_stats(QTreeWidgetItem* item, const ValidationGroupRow& r) {
  item->setText(kN, QString::number(r.n));
  item->setText(kMedian, pct(r.median_abs));
  item->setText(kP90, pct(r.p90_abs));
  item->setText(kSigned, pct(r.signed_median, true));
  item->setData(kN, kValueRole, QVariant::fromValue<qint64>(r.n));
  item->setData(kMedian, kValueRole, r.median_abs);
  item->setData(kP90, kValueRole, r.p90_abs);
  item->setData(kSigned, kValueRole, r.signed_median);
  for (int c = kN; c <= kSigned; ++c) item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
}

}  // namespace

ValidationView::ValidationView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  run_ = new QPushButton(tr("Run published cases"));
  run_->setObjectName(QStringLiteral("run_validation"));
  run_->setToolTip(tr("Predict every case of data/validation/*.json"));
  open_ = new QPushButton(tr("Open case files..."));
  open_->setObjectName(QStringLiteral("open_validation"));
  busy_ = new QProgressBar;
  busy_->setRange(0, 0);
  busy_->setVisible(false);
  busy_->setMaximumWidth(160);
  status_ = new QLabel(tr("Run the published cases, or open case files (capsim-validation/1)."));
  status_->setObjectName(QStringLiteral("validation_status"));
  status_->setWordWrap(true);
  group_by_ = new QComboBox;
  group_by_->setObjectName(QStringLiteral("validation_group_by"));
  for (const std::string& key : validation_group_keys()) group_by_->addItem(QString::fromStdString(key));
  group_by_->setToolTip(tr("Group the error table by source family, engine, GPU, job size (GPUs), model or mode, "
                           "as capsim validate --group-by does"));
  bar->addWidget(run_);
  bar->addWidget(open_);
  bar->addWidget(new QLabel(tr("Group by")));
  bar->addWidget(group_by_);
  bar->addWidget(busy_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);

  chart_ = new QChart;
  chart_->setTitle(tr("Predicted against measured (log-log)"));
  chart_->legend()->setAlignment(Qt::AlignBottom);
  auto* view = new QChartView(chart_);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(260);

  table_ = new QTreeWidget;
  table_->setObjectName(QStringLiteral("validation_table"));
  table_->setColumnCount(6);
  table_->setHeaderLabels({tr("source / metric / case"), tr("n"), tr("median |err|"), tr("p90 |err|"),
                           tr("signed median"), tr("errors")});
  table_->header()->setSectionResizeMode(kName, QHeaderView::Stretch);
  table_->header()->setStretchLastSection(false);
  for (int c = kN; c <= kErrors; ++c) table_->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  detail_ = new QLabel;
  detail_->setObjectName(QStringLiteral("validation_detail"));
  detail_->setWordWrap(true);
  detail_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(view);
  split->addWidget(table_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  layout->addWidget(split, 1);
  layout->addWidget(detail_);

  connect(run_, &QPushButton::clicked, this, &ValidationView::run_requested);
  connect(open_, &QPushButton::clicked, this, [this] {
    const QStringList files = QFileDialog::getOpenFileNames(
        this, tr("Validation case files"), QString::fromStdString((io::data_dir() / "validation").string()),
        tr("Validation cases (*.json)"));
    if (!files.isEmpty()) emit files_chosen(files);
  });
  connect(table_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) { on_item(item); });
  connect(group_by_, &QComboBox::currentTextChanged, this, [this] { build_table(); });
  // A click on a case loads it into the editor.
  auto offer = [this](QTreeWidgetItem* item) {
    if (item && item->data(kName, kKindRole).toInt() == kCaseRow) load_case(item->text(kName));
  };
  connect(table_, &QTreeWidget::itemClicked, this, offer);
  connect(table_, &QTreeWidget::itemActivated, this, offer);
}

void ValidationView::clear_figures() {
  chart_->removeAllSeries();
  for (QAbstractAxis* a : chart_->axes()) {
    chart_->removeAxis(a);
    delete a;
  }
  cases_ = selected_ = nullptr;
  table_->clear();
  detail_->clear();
  points_.clear();
  outcome_ = ValidationOutcome{};
}

void ValidationView::show_running(const QStringList& files) {
  clear_figures();
  busy_->setVisible(true);
  run_->setEnabled(false);
  open_->setEnabled(false);
  QStringList names;
  for (const QString& f : files) names << QFileInfo(f).fileName();
  status_->setText(tr("Predicting the cases of %1 ...").arg(names.join(QStringLiteral(", "))));
}

bool ValidationView::running() const {
  return !busy_->isHidden();
}

QString ValidationView::status() const {
  return status_->text();
}

void ValidationView::show_outcome(const ValidationOutcome& out) {
  clear_figures();
  busy_->setVisible(false);
  run_->setEnabled(true);
  open_->setEnabled(true);
  if (!out.internal_error.empty()) {
    status_->setText(tr("Could not validate: %1").arg(QString::fromStdString(out.internal_error)));
    return;
  }
  points_ = out.points;
  size_t within10 = 0, within25 = 0;
  for (const auto& p : points_) {
    within10 += std::abs(p.error) <= 0.10;
    within25 += std::abs(p.error) <= 0.25;
  }
  status_->setText(tr("%1 predictions from %2 source families: %3 within ±10 %, %4 within ±25 %; %5 cases unsupported")
                       .arg(points_.size())
                       .arg(std::count_if(out.groups_by.at("source").begin(), out.groups_by.at("source").end(),
                                          [](const ValidationGroupRow& r) { return r.metric == "(all)"; }))
                       .arg(within10)
                       .arg(within25)
                       .arg(out.unsupported.size()));

  // Scatter: x measured, y predicted; the bands are straight lines on log-log axes.
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  cases_ = new QScatterSeries;
  cases_->setName(tr("cases"));
  cases_->setMarkerSize(7);
  for (const auto& p : points_) {
    if (p.measured <= 0 || p.predicted <= 0) continue;  // not on a log axis
    cases_->append(p.measured, p.predicted);
    lo = std::min({lo, p.measured, p.predicted});
    hi = std::max({hi, p.measured, p.predicted});
  }
  if (cases_->count() == 0) {
    delete cases_;
    cases_ = nullptr;
  } else {
    lo /= 1.5;
    hi *= 1.5;
    auto* x = new QLogValueAxis;
    x->setTitleText(tr("measured"));
    x->setLabelFormat(QStringLiteral("%g"));
    x->setRange(lo, hi);
    auto* y = new QLogValueAxis;
    y->setTitleText(tr("predicted"));
    y->setLabelFormat(QStringLiteral("%g"));
    y->setRange(lo, hi);
    chart_->addAxis(x, Qt::AlignBottom);
    chart_->addAxis(y, Qt::AlignLeft);
    auto band = [&](double f, const QString& name, const QColor& color, Qt::PenStyle style) {
      auto* s = new QLineSeries;
      s->setName(name);
      s->append(lo, lo * f);
      s->append(hi, hi * f);
      QPen pen(color);
      pen.setWidthF(1.5);
      pen.setStyle(style);
      s->setPen(pen);
      chart_->addSeries(s);
      s->attachAxis(x);
      s->attachAxis(y);
      return s;
    };
    band(1.0, tr("predicted = measured"), Qt::black, Qt::SolidLine);
    band(1.10, tr("±10 %"), QColor(0, 140, 0), Qt::DashLine);
    band(0.90, QString(), QColor(0, 140, 0), Qt::DashLine);
    band(1.25, tr("±25 %"), QColor(220, 120, 0), Qt::DotLine);
    band(0.75, QString(), QColor(220, 120, 0), Qt::DotLine);
    for (QLegendMarker* m : chart_->legend()->markers())
      if (m->label().isEmpty()) m->setVisible(false);
    chart_->addSeries(cases_);
    cases_->attachAxis(x);
    cases_->attachAxis(y);
    selected_ = new QScatterSeries;
    selected_->setName(tr("selected case"));
    selected_->setMarkerSize(13);
    selected_->setColor(Qt::red);
    chart_->addSeries(selected_);
    selected_->attachAxis(x);
    selected_->attachAxis(y);
  }

  outcome_ = out;
  build_table();
}

void ValidationView::build_table() {
  // Table: a group's pooled row, its metrics, then its cases.
  table_->clear();
  detail_->clear();
  if (selected_) selected_->clear();
  const std::string key = group_by_->currentText().toStdString();
  table_->setHeaderLabels({tr("%1 / metric / case").arg(QString::fromStdString(key)), tr("n"), tr("median |err|"),
                           tr("p90 |err|"), tr("signed median"), tr("errors")});
  static const std::vector<ValidationGroupRow> none;
  const auto rows = outcome_.groups_by.find(key);
  const std::vector<ValidationGroupRow>& groups = rows != outcome_.groups_by.end() ? rows->second : none;
  std::map<std::string, QTreeWidgetItem*> group_items;
  for (const ValidationGroupRow& r : groups) {
    QTreeWidgetItem*& g = group_items[r.group];
    if (!g) {
      g = new QTreeWidgetItem(table_, {QString::fromStdString(r.group)});
      g->setData(kName, kKindRole, kGroupRow);
      g->setData(kName, kGroupRole, QString::fromStdString(r.group));
      g->setData(kName, kMetricRole, QStringLiteral("(all)"));
      QFont bold = g->font(kName);
      bold.setBold(true);
      g->setFont(kName, bold);
    }
    if (r.metric == "(all)") {
      set_stats(g, r);
      continue;
    }
    auto* m = new QTreeWidgetItem(g, {QString::fromStdString(r.metric)});
    m->setData(kName, kKindRole, kMetricRow);
    m->setData(kName, kGroupRole, QString::fromStdString(r.group));
    m->setData(kName, kMetricRole, QString::fromStdString(r.metric));
    set_stats(m, r);
  }
  std::map<std::string, QTreeWidgetItem*> case_items;
  for (const ValidationPoint& p : points_) {
    QTreeWidgetItem*& c = case_items[p.id];
    if (!c) {
      const auto g = p.groups.find(key);
      const std::string group = g != p.groups.end() ? g->second : "?";
      QTreeWidgetItem* parent = group_items.count(group) ? group_items[group] : table_->invisibleRootItem();
      c = new QTreeWidgetItem(parent, {QString::fromStdString(p.id)});
      c->setData(kName, kKindRole, kCaseRow);
      c->setToolTip(kName, QString::fromStdString(p.file));
    }
    const QString e = QStringLiteral("%1 %2").arg(QString::fromStdString(p.metric), pct(p.error, true));
    c->setText(kErrors, c->text(kErrors).isEmpty() ? e : c->text(kErrors) + QStringLiteral(", ") + e);
    c->setText(kN, QString::number(c->text(kN).toInt() + 1));
    c->setTextAlignment(kN, Qt::AlignRight | Qt::AlignVCenter);
  }
  for (auto& [name, g] : group_items) g->setExpanded(false);
}

void ValidationView::on_item(QTreeWidgetItem* item) {
  if (selected_) selected_->clear();
  if (!item || item->data(kName, kKindRole).toInt() != kCaseRow) {
    detail_->clear();
    return;
  }
  const std::string id = item->text(kName).toStdString();
  QStringList lines;
  QString file;
  for (const ValidationPoint& p : points_) {
    if (p.id != id) continue;
    file = QString::fromStdString(p.file);
    lines << tr("%1: predicted %2, measured %3, error %4")
                 .arg(QString::fromStdString(p.metric))
                 .arg(p.predicted, 0, 'g', 5)
                 .arg(p.measured, 0, 'g', 5)
                 .arg(pct(p.error, true));
    if (selected_ && p.measured > 0 && p.predicted > 0) selected_->append(p.measured, p.predicted);
  }
  detail_->setText(tr("%1 (%2)\n%3").arg(QString::fromStdString(id), file, lines.join(QStringLiteral("\n"))));
}

std::vector<QPointF> ValidationView::points() const {
  std::vector<QPointF> out;
  if (cases_)
    for (int i = 0; i < cases_->count(); ++i) out.push_back(cases_->at(i));
  return out;
}

ValidationGroupRow ValidationView::group_row(const QString& group, const QString& metric) const {
  ValidationGroupRow r;
  r.n = -1;
  for (QTreeWidgetItemIterator it(table_); *it; ++it) {
    const QTreeWidgetItem* item = *it;
    const int kind = item->data(kName, kKindRole).toInt();
    if (kind != kGroupRow && kind != kMetricRow) continue;
    if (item->data(kName, kGroupRole).toString() != group || item->data(kName, kMetricRole).toString() != metric)
      continue;
    r.group = group.toStdString();
    r.metric = metric.toStdString();
    r.n = item->data(kN, kValueRole).toLongLong();
    r.median_abs = item->data(kMedian, kValueRole).toDouble();
    r.p90_abs = item->data(kP90, kValueRole).toDouble();
    r.signed_median = item->data(kSigned, kValueRole).toDouble();
    break;
  }
  return r;
}

bool ValidationView::select_case(const QString& id) {
  for (QTreeWidgetItemIterator it(table_); *it; ++it)
    if ((*it)->data(kName, kKindRole).toInt() == kCaseRow && (*it)->text(kName) == id) {
      table_->setCurrentItem(*it);
      return true;
    }
  return false;
}

bool ValidationView::load_case(const QString& id) {
  if (!select_case(id)) return false;
  for (const ValidationPoint& p : points_)
    if (QString::fromStdString(p.id) == id) {
      emit case_chosen(QString::fromStdString(p.file), id);
      return true;
    }
  return false;
}

QString ValidationView::detail() const {
  return detail_->text();
}

bool ValidationView::set_group_by(const QString& key) {
  const int i = group_by_->findText(key);
  if (i < 0) return false;
  group_by_->setCurrentIndex(i);
  return true;
}

QString ValidationView::group_by() const {
  return group_by_->currentText();
}

}  // namespace capsim::gui
