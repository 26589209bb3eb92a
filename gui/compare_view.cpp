#include "compare_view.hpp"

#include <QCheckBox>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "report_table.hpp"

namespace capsim::gui {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
enum Column { kMetric, kUnit, kPinned, kCurrent, kDifference, kRelative, kColumns };

std::vector<ReportMetric> metrics_of(const std::string& report) {
  if (report.empty()) return {};
  return report_metrics(nlohmann::json::parse(report));
}

QString number(double v) {
  return std::isnan(v) ? QStringLiteral("-") : QString::number(v, 'g', 6);
}

QTableWidgetItem* cell(const QString& text, double value, bool right) {
  auto* item = new QTableWidgetItem(text);
  item->setData(Qt::UserRole, value);
  if (right) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return item;
}

}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  pin_ = new QPushButton(tr("Pin current"));
  pin_->setObjectName(QStringLiteral("pin"));
  pin_->setToolTip(tr("Keep the current training or serving report (the scenario the editor shows) to compare "
                      "edits against (Ctrl+Shift+P)"));
  unpin_ = new QPushButton(tr("Unpin"));
  unpin_->setObjectName(QStringLiteral("unpin"));
  only_differences_ = new QCheckBox(tr("Only metrics that differ"));
  only_differences_->setChecked(true);
  status_ = new QLabel;
  status_->setObjectName(QStringLiteral("status"));
  status_->setWordWrap(true);
  bar->addWidget(pin_);
  bar->addWidget(unpin_);
  bar->addWidget(only_differences_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);

  table_ = new QTableWidget(0, kColumns);
  table_->setObjectName(QStringLiteral("compare"));
  table_->setHorizontalHeaderLabels(
      {tr("metric"), tr("unit"), tr("pinned"), tr("current"), tr("difference"), tr("relative")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->setVisible(false);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(kMetric, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(kUnit, QHeaderView::ResizeToContents);
  layout->addWidget(table_, 1);

  connect(pin_, &QPushButton::clicked, this, &CompareView::pin_requested);
  connect(unpin_, &QPushButton::clicked, this, &CompareView::unpin_requested);
  connect(only_differences_, &QCheckBox::toggled, this, &CompareView::apply_filter);
  show_reports({}, {});
}

void CompareView::show_reports(const std::string& pinned, const std::string& current, const QString& kind,
                               const QString& note) {
  table_->setRowCount(0);
  unpin_->setEnabled(!pinned.empty());
  if (pinned.empty()) {
    status_->setText(tr("Pin the current training or serving report, then edit the scenario to compare."));
    return;
  }
  const std::vector<ReportMetric> a = metrics_of(pinned), b = metrics_of(current);
  // The pinned report's order, then what only the current report has.
  std::map<std::string, size_t> in_b;
  for (size_t i = 0; i < b.size(); ++i) in_b.emplace(b[i].key, i);
  std::map<std::string, bool> seen;
  struct Pair {
    const ReportMetric* pinned;
    const ReportMetric* current;
  };
  std::vector<Pair> pairs;
  for (const ReportMetric& m : a) {
    const auto it = in_b.find(m.key);
    pairs.push_back({&m, it == in_b.end() ? nullptr : &b[it->second]});
    seen[m.key] = true;
  }
  for (const ReportMetric& m : b)
    if (!seen.count(m.key)) pairs.push_back({nullptr, &m});

  int differing = 0;
  table_->setRowCount(static_cast<int>(pairs.size()));
  for (size_t i = 0; i < pairs.size(); ++i) {
    const ReportMetric& any = pairs[i].pinned ? *pairs[i].pinned : *pairs[i].current;
    const double p = pairs[i].pinned ? pairs[i].pinned->number().value_or(kNaN) : kNaN;
    const double c = pairs[i].current ? pairs[i].current->number().value_or(kNaN) : kNaN;
    const bool differs = !(pairs[i].pinned && pairs[i].current && pairs[i].pinned->value == pairs[i].current->value);
    const double diff = c - p;
    const double rel = p != 0 ? diff / std::abs(p) : (diff == 0 ? 0.0 : kNaN);
    const int r = static_cast<int>(i);
    table_->setItem(r, kMetric, cell(QString::fromStdString(any.key), differs ? 1 : 0, false));
    table_->setItem(r, kUnit, cell(QString::fromStdString(any.unit), 0, false));
    table_->setItem(r, kPinned, cell(number(p), p, true));
    table_->setItem(r, kCurrent, cell(number(c), c, true));
    table_->setItem(r, kDifference, cell(std::isnan(diff) ? QStringLiteral("-") : QString::number(diff, 'g', 6), diff, true));
    table_->setItem(r, kRelative,
                    cell(std::isnan(rel) ? QStringLiteral("-") : QStringLiteral("%1 %").arg(100 * rel, 0, 'f', 2), rel, true));
    if (differs) {
      ++differing;
      QFont bold = table_->font();
      bold.setBold(true);
      // Better or worse depends on the metric: the colour only says "differs".
      for (int col = 0; col < kColumns; ++col) {
        table_->item(r, col)->setBackground(QColor(255, 243, 176));
        if (col >= kDifference) table_->item(r, col)->setFont(bold);
      }
    }
  }
  QString text = current.empty()
                     ? tr("Pinned %1 report; no current %1 report.").arg(kind)
                     : tr("%1 of %2 metrics of the current %3 report differ from the pinned one.")
                           .arg(differing)
                           .arg(pairs.size())
                           .arg(kind);
  if (!note.isEmpty()) text += QLatin1Char(' ') + note;
  status_->setText(text);
  apply_filter();
}

void CompareView::apply_filter() {
  const bool only = only_differences_->isChecked();
  for (int r = 0; r < table_->rowCount(); ++r)
    table_->setRowHidden(r, only && table_->item(r, kMetric)->data(Qt::UserRole).toInt() == 0);
}

std::optional<CompareRow> CompareView::row(const QString& key) const {
  for (int r = 0; r < table_->rowCount(); ++r)
    if (table_->item(r, kMetric)->text() == key) {
      auto v = [&](int col) { return table_->item(r, col)->data(Qt::UserRole).toDouble(); };
      return CompareRow{key, table_->item(r, kUnit)->text(), v(kPinned), v(kCurrent), v(kDifference), v(kRelative),
                        table_->item(r, kMetric)->data(Qt::UserRole).toInt() != 0};
    }
  return std::nullopt;
}

int CompareView::rows() const {
  return table_->rowCount();
}

int CompareView::shown_rows() const {
  int n = 0;
  for (int r = 0; r < table_->rowCount(); ++r) n += table_->isRowHidden(r) ? 0 : 1;
  return n;
}

void CompareView::set_only_differences(bool only) {
  only_differences_->setChecked(only);
}

QString CompareView::status() const {
  return status_->text();
}

}  // namespace capsim::gui
