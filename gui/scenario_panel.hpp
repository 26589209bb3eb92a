#pragma once
/// The scenario editor: shared model and system settings, a Training tab and a Serving
/// tab. It holds each kind's scenario as the JSON document the CLI reads; a widget edit
/// writes only its own key, so a file opened here reads the same as on the command line.

#include <QWidget>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/diagnostics.hpp"

class QLabel;
class QTabWidget;

namespace capsim::gui {

/// Which of the two documents.
enum class ScenarioKind { training, inference };

/// Editor for a training and a serving scenario document.
class ScenarioPanel : public QWidget {
  Q_OBJECT

 public:
  /// Builds the widgets from the presets in the data folder and loads the default scenarios.
  explicit ScenarioPanel(QWidget* parent = nullptr);
  ~ScenarioPanel() override;

  /// The document of `kind`, exactly as it would be saved.
  const nlohmann::json& document(ScenarioKind kind) const;
  /// The kind of the tab in front.
  ScenarioKind kind() const;
  /// Bring the tab of `kind` to the front.
  void set_kind(ScenarioKind kind);
  /// Replace the document of the file's kind ("kind", else the section it has) with `doc`,
  /// copy its model and system into the other document, fill the widgets and show its tab.
  void load_document(const nlohmann::json& doc);
  /// List `issues` under the editor (as the CLI prints them) and mark the widgets they name;
  /// an empty list clears both.
  void show_issues(const std::vector<Issue>& issues);
  /// Use the Hugging Face config.json at `path` as the model of both documents ("model":
  /// its absolute path, which the command line reads the same way) and show its parameter
  /// count; a file that does not read is left in the document, so that its problems are
  /// listed as the command line prints them. True when it reads.
  bool open_hf_config(const QString& path);
  /// Replay the requests of the file at `path` (CSV or JSON Lines, as the command line
  /// reads them) when the serving workload is "trace": its absolute path becomes
  /// inference.workload.trace_file.
  void set_trace_file(const QString& path);
  /// Beside each field of `kind` left "auto" (or to the engine's default), what the
  /// evaluation chose: `values` is the training report's "layout" object, or the serving
  /// report's "resolved" object with the engine's "preemption"; a value that is not an
  /// object shows the plain "auto" text again.
  void show_resolved(ScenarioKind kind, const nlohmann::json& values);
  /// The text the editor of `pointer` shows ("" when there is none); a length's
  /// distribution menu is `pointer` + "/dist".
  QString shown_text(const QString& pointer) const;
  /// Show a single line of text in the issue area (an internal error); empty clears it.
  void show_message(const QString& text);
  /// The text the issue area shows now.
  QString issue_text() const;

 signals:
  /// A widget edit changed the document of `kind`. A model or system edit, or a loaded
  /// document, changes both: the document behind its tab is signalled first.
  void document_changed(capsim::gui::ScenarioKind kind);
  /// The tab in front changed.
  void kind_changed(capsim::gui::ScenarioKind kind);
  /// "Open HF config..." was pressed: the window asks for the file.
  void hf_config_requested();
  /// "Trace file..." was pressed: the window asks for the file.
  void trace_file_requested();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  QWidget* build_shared_box();
  QWidget* build_training_tab();
  QWidget* build_serving_tab();
  void fill_widgets();
  void write_field(size_t index);
  void refresh_model_info();
  void refresh_gpu_tooltip();
  void refresh_engine_versions();
  void refresh_workload_enables();
  void refresh_lora_enables();
};

}  // namespace capsim::gui
