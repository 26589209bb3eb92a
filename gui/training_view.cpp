#include "training_view.hpp"

#include "chart_helpers.hpp"

#include <QBarCategoryAxis>
#include <QBarLegendMarker>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHeaderView>
#include <QHorizontalStackedBarSeries>
#include <QLabel>
#include <QLegend>
#include <QLineSeries>
#include <QStackedBarSeries>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "capsim/core/units.hpp"

namespace capsim::gui {

namespace {

const QStringList kMemoryComponents = {QStringLiteral("weights"), QStringLiteral("gradients"),
                                       QStringLiteral("optimizer"), QStringLiteral("activations"),
                                       QStringLiteral("other")};
/// The step's parts; communication is the exposed part (not hidden behind compute).
const QStringList kStepComponents = {QStringLiteral("compute"), QStringLiteral("recompute"), QStringLiteral("TP comm"),
                                     QStringLiteral("CP comm"), QStringLiteral("EP comm"),   QStringLiteral("PP comm"),
                                     QStringLiteral("DP comm"), QStringLiteral("bubble"),    QStringLiteral("optimizer")};

void remove_axes(QChart* chart) {
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
}

QString gib(double bytes) {
  return QStringLiteral("%1 GiB").arg(bytes / kGiB, 0, 'f', 2);
}

}  // namespace

TrainingView::TrainingView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  memory_chart_ = new QChart;
  memory_chart_->setTitle(tr("Memory per GPU by pipeline stage"));
  memory_chart_->legend()->setAlignment(Qt::AlignBottom);
  step_chart_ = new QChart;
  step_chart_->setTitle(tr("Where the step time goes (communication: the exposed part)"));
  step_chart_->legend()->setAlignment(Qt::AlignBottom);
  verdict_ = new QLabel;
  verdict_->setObjectName(QStringLiteral("verdict"));
  verdict_->setWordWrap(true);
  summary_ = new QLabel;
  summary_->setObjectName(QStringLiteral("summary"));
  summary_->setWordWrap(true);
  notes_ = new QLabel;
  notes_->setWordWrap(true);
  notes_->setStyleSheet(QStringLiteral("color: #555;"));
  layout->addWidget(chart_view(memory_chart_, 240), 3);
  layout->addWidget(verdict_);
  layout->addWidget(chart_view(step_chart_, 240), 2);
  layout->addWidget(summary_);
  layout->addWidget(notes_);
  operators_ = new QTableWidget(0, 6);
  operators_->setObjectName(QStringLiteral("operators"));
  operators_->setHorizontalHeaderLabels({tr("operator (one microbatch)"), tr("block"), tr("runs"), tr("pass ms"),
                                         tr("share"), tr("fwd TFLOP/s")});
  operators_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  operators_->verticalHeader()->setVisible(false);
  operators_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  operators_->setMinimumHeight(100);
  layout->addWidget(operators_, 2);
  clear(tr("no result yet"));
}

void TrainingView::clear(const QString& why) {
  for (QChart* c : {memory_chart_, step_chart_}) {
    c->removeAllSeries();
    remove_axes(c);
  }
  verdict_->setText(why);
  verdict_->setStyleSheet(QStringLiteral("color: #a00000; font-weight: bold;"));
  summary_->clear();
  notes_->clear();
  operators_->setRowCount(0);
}

void TrainingView::show_outcome(const TrainingOutcome& outcome) {
  if (!outcome.ok()) {
    clear(outcome.internal_error.empty()
              ? tr("No result: the input has problems (listed under the editor).")
              : tr("Internal error: %1").arg(QString::fromStdString(outcome.internal_error)));
    return;
  }
  clear(QString());
  const TrainEvaluation& ev = outcome.evaluation;

  // Memory: one stacked bar per stage, the capacity as a line across them.
  auto* bars = new QStackedBarSeries;
  std::vector<QBarSet*> sets;
  for (const QString& name : kMemoryComponents) {
    sets.push_back(new QBarSet(name));
    bars->append(sets.back());
  }
  QStringList categories;
  double top = 0, capacity = 0;
  for (const StageMemory& s : ev.memory.stages) {
    categories << tr("stage %1").arg(s.stage);
    const double parts[] = {s.weights_bytes, s.gradients_bytes, s.optimizer_bytes, s.activations_bytes, s.other_bytes};
    for (size_t i = 0; i < sets.size(); ++i) sets[i]->append(parts[i] / kGiB);
    top = std::max(top, s.total_bytes / kGiB);
    capacity = s.capacity_bytes / kGiB;
  }
  memory_chart_->addSeries(bars);
  auto* cap = new QLineSeries;
  cap->setName(tr("capacity %1").arg(gib(capacity * kGiB)));
  cap->append(-0.5, capacity);
  cap->append(static_cast<double>(categories.size()) - 0.5, capacity);
  QPen pen(Qt::red);
  pen.setWidth(2);
  pen.setStyle(Qt::DashLine);
  cap->setPen(pen);
  memory_chart_->addSeries(cap);
  auto* x = new QBarCategoryAxis;
  x->append(categories);
  auto* y = new QValueAxis;
  y->setTitleText(tr("GiB"));
  y->setRange(0, std::max(top, capacity) * 1.1);
  memory_chart_->addAxis(x, Qt::AlignBottom);
  memory_chart_->addAxis(y, Qt::AlignLeft);
  bars->attachAxis(x);
  bars->attachAxis(y);
  // The line's x runs over the bars' category positions (stage i at x = i).
  auto* line_x = new QValueAxis;
  line_x->setRange(-0.5, static_cast<double>(categories.size()) - 0.5);
  line_x->setVisible(false);
  memory_chart_->addAxis(line_x, Qt::AlignTop);
  cap->attachAxis(line_x);
  cap->attachAxis(y);

  const StageMemory& peak = ev.memory.peak();
  if (ev.memory.fits()) {
    verdict_->setText(tr("Fits: the fullest GPU (stage %1) needs %2 of %3.")
                          .arg(peak.stage)
                          .arg(gib(peak.total_bytes), gib(peak.capacity_bytes)));
    verdict_->setStyleSheet(QStringLiteral("color: #006000; font-weight: bold;"));
  } else {
    verdict_->setText(tr("Does not fit: stage %1 needs %2 per GPU, the GPU has %3.")
                          .arg(peak.stage)
                          .arg(gib(peak.total_bytes), gib(peak.capacity_bytes)));
  }

  if (!ev.feasible) {
    // As `capsim train` prints it: no step time or MFU for a layout that cannot run, but the
    // single changes that would make it fit.
    QStringList lines;
    lines << tr("No step time: the layout does not fit.");
    if (ev.remedies.empty()) lines << tr("No single change to ZeRO, recompute, micro batch, pp, tp or dp helps.");
    else lines << tr("Single changes and the largest stage they leave:");
    for (const FitRemedy& f : ev.remedies)
      lines << tr("  %1: %2, %3")
                   .arg(QString::fromStdString(f.change), gib(f.peak_bytes),
                        f.fits ? tr("fits") : tr("still too large"));
    summary_->setText(lines.join(QStringLiteral("\n")));
  } else if (ev.step) {
    const StepBreakdown& st = *ev.step;
    const double parts[] = {st.compute_s,    st.recompute_s,  st.exposed_tp_s, st.exposed_cp_s, st.exposed_ep_s,
                            st.exposed_pp_s, st.exposed_dp_s, st.bubble_s,     st.optimizer_s};
    auto* series = new QHorizontalStackedBarSeries;
    for (int i = 0; i < kStepComponents.size(); ++i) {
      auto* set = new QBarSet(kStepComponents[i]);
      set->append(parts[i]);
      series->append(set);
    }
    step_chart_->addSeries(series);
    // Nine parts do not fit a legend line: only those the step has are named.
    for (QLegendMarker* m : step_chart_->legend()->markers(series))
      if (auto* bm = qobject_cast<QBarLegendMarker*>(m); bm && bm->barset()->at(0) == 0) bm->setVisible(false);
    auto* cat = new QBarCategoryAxis;
    cat->append(tr("step"));
    auto* secs = new QValueAxis;
    secs->setTitleText(tr("seconds"));
    secs->setMin(0);
    step_chart_->addAxis(cat, Qt::AlignLeft);
    step_chart_->addAxis(secs, Qt::AlignBottom);
    series->attachAxis(cat);
    series->attachAxis(secs);
    summary_->setText(tr("Step %1 s   MFU %2 %   %3 tokens/s (%4 per GPU)")
                          .arg(st.step_s, 0, 'f', 3)
                          .arg(100 * st.mfu, 0, 'f', 1)
                          .arg(st.tokens_per_s, 0, 'f', 0)
                          .arg(st.tokens_per_s_per_gpu, 0, 'f', 0));
    // With a token budget: the report's own figures (as `capsim train` prints them).
    const nlohmann::json report = nlohmann::json::parse(outcome.report, nullptr, false);
    if (report.is_object() && report.contains("budget") && report["budget"].is_object()) {
      const nlohmann::json& b = report["budget"];
      QString line = tr("%1 B tokens: %2 days at %3% effective time, %4 GPU-hours")
                         .arg(b.value("tokens", 0.0) / 1e9, 0, 'g', 4)
                         .arg(b.value("days", 0.0), 0, 'f', 1)
                         .arg(100.0 * b.value("effective_training_fraction", 1.0), 0, 'f', 1)
                         .arg(b.value("gpu_hours", 0.0), 0, 'f', 0);
      if (b.contains("cost_usd")) line += tr(", $%1").arg(b.value("cost_usd", 0.0), 0, 'f', 0);
      line += tr(", %1 MWh").arg(b.value("energy_mwh", 0.0), 0, 'f', 1);
      summary_->setText(summary_->text() + QStringLiteral("\n") + line);
    }
  }
  QStringList notes;
  const TrainingPlan& p = ev.plan;
  notes << tr("Layout: tp %1, pp %2, dp %3, cp %4, ep %5, micro batch %6, recompute %7, ZeRO %8")
               .arg(p.tp)
               .arg(p.pp)
               .arg(p.dp)
               .arg(p.cp)
               .arg(p.ep)
               .arg(p.micro_batch.value_or(1))
               .arg(QString::fromUtf8(to_string(p.recompute.value_or(Recompute::none)).data()))
               .arg(p.zero.value_or(0));
  if (outcome.scenario.model.moe && p.ep > 1)
    notes << tr("Experts: %1 dispatch%2")
                 .arg(QString::fromUtf8(to_string(dispatcher_of(p, outcome.scenario.model)).data()))
                 .arg(ep_overlap_on(p) ? tr(", all-to-all overlapped with another microbatch's computation") : QString());
  if (!ev.auto_fields.empty()) {
    QStringList names;
    for (const auto& f : ev.auto_fields) names << QString::fromStdString(f);
    notes << tr("Chosen for you (auto): %1").arg(names.join(QStringLiteral(", ")));
  }
  for (const auto& w : ev.warnings) notes << tr("warning: %1").arg(QString::fromStdString(w));
  notes_->setText(notes.join(QStringLiteral("\n")));

  // The operators: computation by pass time, largest first, then the collectives before
  // any overlap hides them (none for a layout that cannot run).
  std::vector<const OperatorTime*> rows;
  double compute = 0;
  if (ev.feasible)
    for (const OperatorTime& o : outcome.operators) {
      rows.push_back(&o);
      if (!o.communication) compute += o.pass_s();
    }
  std::stable_sort(rows.begin(), rows.end(), [](const OperatorTime* a, const OperatorTime* b) {
    if (a->communication != b->communication) return !a->communication;
    return a->pass_s() > b->pass_s();
  });
  operators_->setRowCount(static_cast<int>(rows.size()));
  for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
    const OperatorTime& o = *rows[static_cast<size_t>(r)];
    const QString share = o.communication ? tr("comm, before overlap")
                                          : QStringLiteral("%1 %").arg(compute > 0 ? 100.0 * o.pass_s() / compute : 0.0, 0, 'f', 1);
    const QString rate = o.fwd_flops > 0 && o.fwd_s > 0 ? QString::number(o.fwd_flops / o.fwd_s / 1e12, 'f', 0) : QString();
    const QStringList cells = {QString::fromStdString(o.name), QString::fromStdString(o.block), QString::number(o.count),
                               QString::number(1e3 * o.pass_s(), 'f', 2), share, rate};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c >= 2) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      if (o.communication) item->setForeground(QColor(0x55, 0x55, 0x55));
      operators_->setItem(r, c, item);
    }
  }
}

std::vector<QStringList> TrainingView::operator_rows() const {
  std::vector<QStringList> out;
  for (int r = 0; r < operators_->rowCount(); ++r) {
    QStringList row;
    for (int c = 0; c < operators_->columnCount(); ++c) row << (operators_->item(r, c) ? operators_->item(r, c)->text() : QString());
    out.push_back(row);
  }
  return out;
}

std::vector<double> TrainingView::memory_values(const QString& component) const {
  std::vector<double> out;
  for (QAbstractSeries* s : memory_chart_->series())
    if (auto* bars = qobject_cast<QStackedBarSeries*>(s))
      for (QBarSet* set : bars->barSets())
        if (set->label() == component)
          for (int i = 0; i < set->count(); ++i) out.push_back(set->at(i));
  return out;
}

double TrainingView::capacity_line() const {
  for (QAbstractSeries* s : memory_chart_->series())
    if (auto* line = qobject_cast<QLineSeries*>(s))
      if (line->count() > 0) return line->at(0).y();
  return 0;
}

QString TrainingView::verdict() const {
  return verdict_->text();
}

QString TrainingView::notes() const {
  return notes_->text();
}

std::vector<double> TrainingView::step_values() const {
  std::vector<double> out;
  for (QAbstractSeries* s : step_chart_->series())
    if (auto* bars = qobject_cast<QHorizontalStackedBarSeries*>(s))
      for (QBarSet* set : bars->barSets()) out.push_back(set->count() > 0 ? set->at(0) : 0);
  return out;
}

QString TrainingView::summary() const {
  return summary_->text();
}

}  // namespace capsim::gui
