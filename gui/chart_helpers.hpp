#pragma once
/// Small pieces the views share: a chart emptied of its series and axes, a chart's view, the
/// points of a named series, and the red error line under a view's buttons.

#include <QAbstractAxis>
#include <QChart>
#include <QChartView>
#include <QLabel>
#include <QPointF>
#include <QXYSeries>
#include <vector>

namespace capsim::gui {

/// Remove every series and axis of `chart` (the axes are deleted).
inline void clear_chart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
}

/// An antialiased view of `chart`, at least `min_height` pixels tall.
inline QChartView* chart_view(QChart* chart, int min_height) {
  auto* view = new QChartView(chart);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(min_height);
  return view;
}

/// The points of `chart`'s XY series named `name`, in order.
inline std::vector<QPointF> points_of(const QChart* chart, const QString& name) {
  std::vector<QPointF> out;
  for (QAbstractSeries* s : chart->series())
    if (auto* xy = qobject_cast<QXYSeries*>(s); xy && xy->name() == name)
      for (const QPointF& p : xy->points()) out.push_back(p);
  return out;
}

/// A hidden, selectable, word-wrapped red line for a reader's message (object name "error").
inline QLabel* error_label() {
  auto* label = new QLabel;
  label->setObjectName(QStringLiteral("error"));
  label->setWordWrap(true);
  label->setTextInteractionFlags(Qt::TextSelectableByMouse);
  label->setStyleSheet(QStringLiteral("color: #a00000;"));
  label->setVisible(false);
  return label;
}

}  // namespace capsim::gui
