#pragma once
/// Layout search results (`capsim search`): run control (search, cancel, a busy bar), a
/// sortable table of the best layouts and a scatter of tokens/s against GPUs or cost with
/// the Pareto front highlighted; a row or a point clicked is offered as the training
/// scenario's layout.

#include <QWidget>
#include <vector>

#include "evaluation.hpp"

class QChart;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace capsim::gui {

/// Shows one search and the state of the search in flight.
class SearchView : public QWidget {
  Q_OBJECT

 public:
  explicit SearchView(QWidget* parent = nullptr);

  /// The GPU counts typed in ("8, 16, 32"); empty: the scenario's. Throws nothing: words
  /// that are not positive integers are skipped.
  std::vector<int64_t> gpu_counts() const;
  /// Set the GPU counts field ("8,16").
  void set_gpu_counts(const QString& text);
  /// How many layouts to list.
  size_t top() const;

  /// A search started: busy bar on, Cancel enabled, figures cleared.
  void show_running();
  /// The search in flight has costed `done` of `total` layouts (total 0: still enumerating).
  void show_progress(qint64 done, qint64 total);
  /// The progress bar's share done, 0 to 1; -1 while it shows no share (busy, or idle).
  double progress() const;
  /// The search was cancelled or its input is invalid: clear the figures, say `why`.
  void show_idle(const QString& why);
  /// Draw a finished search.
  void show_outcome(const SearchOutcome& outcome);
  /// Whether a search is shown as in flight.
  bool running() const;
  /// The status line.
  QString status() const;

  /// Rows listed.
  int rows() const;
  /// The candidate shown on table row `row` (after any sorting).
  const SearchCandidate& candidate(int row) const;
  /// The text of `row` under the column headed `header` ("GPUs", "tp", "step s", ...).
  QString cell(int row, const QString& header) const;
  /// Sort the table by the column headed `header`, as a click on its header does.
  void sort_by(const QString& header, Qt::SortOrder order);
  /// The scatter's points of the listed layouts: (GPUs, tokens/s), or with the cost axis
  /// ($ per million tokens, tokens/s).
  std::vector<QPointF> points() const;
  /// The scatter's horizontal axis: "gpus" or "cost" ($ per million tokens).
  void set_x_axis(const QString& key);
  /// The $/GPU-hour the cost axis uses (0: none known for the GPU).
  double price() const;
  /// The highlighted Pareto front, by x: the plotted layouts no other beats on both axes.
  std::vector<QPointF> pareto_points() const;
  /// A click on the scatter at `p` (chart values): the nearest layout is offered as a
  /// table row click offers it. False when nothing is plotted.
  bool click_point(const QPointF& p);
  /// Click table row `row`.
  void click_row(int row);

 signals:
  void run_requested();
  void cancel_requested();
  /// A row was clicked: use this layout.
  void layout_chosen(const capsim::SearchCandidate& candidate);

 private:
  void clear_figures();
  void draw_scatter();
  double x_of(const SearchCandidate& c) const;
  int column(const QString& header) const;
  QTableWidget* table_ = nullptr;
  QChart* chart_ = nullptr;
  QLabel* status_ = nullptr;
  QProgressBar* busy_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QLineEdit* gpus_ = nullptr;
  QSpinBox* top_ = nullptr;
  std::vector<SearchCandidate> candidates_;
  std::vector<SearchCandidate> pareto_;  ///< the library's front (GPUs, tokens/s, memory headroom)
  std::vector<SearchCandidate> front_;   ///< the front drawn on the chosen axes
  QComboBox* x_axis_ = nullptr;
  double price_ = 0;
  QString price_source_;
};

}  // namespace capsim::gui
