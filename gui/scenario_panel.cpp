#include "scenario_panel.hpp"

#include <QAbstractItemView>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "capsim/core/model.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "evaluation.hpp"

namespace capsim::gui {

using nlohmann::json;

namespace {

/// Which documents a field writes.
enum class Scope { shared, training, inference };

/// The scenarios a new window starts with: Llama 3 8B on one DGX H100 node.
json default_training_document() {
  return json::parse(R"({
    "id": "gui-training", "kind": "training", "model": "llama3-8b",
    "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8, "nic_gbps_per_gpu": 400},
    "training": {"tp": 1, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "sp": false, "zero": 1, "micro_batch": 1,
                 "global_batch": 64, "seq_len": 8192, "recompute": "selective", "precision": "bf16"}})");
}

json default_serving_document() {
  return json::parse(R"({
    "id": "gui-serving", "kind": "inference", "model": "llama3-8b",
    "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8, "nic_gbps_per_gpu": 400},
    "inference": {"tp": 1, "weight_dtype": "bf16",
                  "workload": {"mode": "poisson", "qps": 4, "num_requests": 200,
                               "input_tokens": {"mean": 512, "dist": "fixed"},
                               "output_tokens": {"mean": 128, "dist": "fixed"}}}})");
}

/// One engine profile as the version menu lists it.
struct EngineEntry {
  std::string name, label, from;
};

std::vector<EngineEntry> engine_entries() {
  std::vector<EngineEntry> out;
  for (const std::string& id : io::engine_profile_ids()) {
    try {
      const json doc = io::read_json_file(io::data_dir() / "engines" / (id + ".json"));
      std::string from;
      if (doc.contains("versions") && doc["versions"].contains("from") && doc["versions"]["from"].is_string())
        from = doc["versions"]["from"].get<std::string>();
      out.push_back({doc.value("name", id), doc.value("label", id), from});
    } catch (const std::exception&) {
      // A profile that does not read is reported by the scenario reader when selected.
    }
  }
  return out;
}

QString gpu_tooltip(const std::string& id) {
  try {
    const GpuSpec g = io::load_gpu(id);
    return QString::fromStdString(g.name) +
           QStringLiteral(
               "\nBF16 dense %1 TFLOP/s, FP8 %2 TFLOP/s\nHBM %3 GiB at %4 GB/s\nNVLink %5 GB/s per direction\nTDP %6 W")
               .arg(g.peak_bf16_tflops)
               .arg(g.peak_fp8_tflops)
               .arg(g.hbm_capacity_bytes / kGiB, 0, 'f', 1)
               .arg(g.hbm_bandwidth_gbps)
               .arg(g.nvlink_bw_unidir_gbps)
               .arg(g.tdp_w);
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
}

}  // namespace

/// A widget bound to one key of the documents.
struct Field {
  std::string pointer;
  Scope scope = Scope::training;
  QWidget* widget = nullptr;
  QComboBox* dist = nullptr;     ///< length fields: the distribution beside the mean
  json fallback;                 ///< shown when the document lacks the key
  bool erase_when_auto = false;  ///< "auto" (or "") leaves the key out of the document
};

struct ScenarioPanel::Impl {
  json training = default_training_document();
  json serving = default_serving_document();
  std::vector<Field> fields;
  std::vector<EngineEntry> engines = engine_entries();
  bool filling = false;
  QTabWidget* tabs = nullptr;
  QLabel* model_info = nullptr;
  QLabel* issues = nullptr;
  QComboBox* model = nullptr;
  QComboBox* gpu = nullptr;
  QComboBox* engine_name = nullptr;
  QComboBox* engine_version = nullptr;
  QComboBox* mode = nullptr;
  QDoubleSpinBox* qps = nullptr;
  QSpinBox* concurrency = nullptr;

  json& doc(ScenarioKind k) { return k == ScenarioKind::training ? training : serving; }
  size_t index_of(const std::string& pointer) const {
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i].pointer == pointer) return i;
    return fields.size();
  }
};

namespace {

QSpinBox* spin(int lo, int hi, const char* auto_text = nullptr) {
  auto* s = new QSpinBox;
  s->setRange(auto_text ? 0 : lo, hi);
  if (auto_text) s->setSpecialValueText(QString::fromUtf8(auto_text));
  s->setKeyboardTracking(false);
  return s;
}

QComboBox* combo(const std::vector<std::pair<QString, QVariant>>& items) {
  auto* c = new QComboBox;
  for (const auto& [text, data] : items) c->addItem(text, data);
  return c;
}

std::optional<json> widget_value(const Field& f) {
  if (f.dist) {
    const auto* mean = static_cast<QSpinBox*>(f.widget);
    return json{{"mean", mean->value()}, {"dist", f.dist->currentData().toString().toStdString()}};
  }
  if (auto* s = qobject_cast<QSpinBox*>(f.widget)) {
    if (!s->specialValueText().isEmpty() && s->value() == s->minimum()) return json("auto");
    return json(s->value());
  }
  if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget)) return json(d->value());
  if (auto* c = qobject_cast<QCheckBox*>(f.widget)) return json(c->isChecked());
  if (auto* c = qobject_cast<QComboBox*>(f.widget)) {
    const QVariant v = c->currentData();
    if (!v.isValid()) return std::nullopt;  // a value from the file the menu cannot write back
    if (v.typeId() == QMetaType::Int) return json(v.toInt());
    return json(v.toString().toStdString());
  }
  return std::nullopt;
}

void select_combo(QComboBox* c, const json& v) {
  int i = -1;
  if (v.is_number_integer())
    i = c->findData(QVariant(v.get<int>()));
  else if (v.is_string())
    i = c->findData(QVariant(QString::fromStdString(v.get<std::string>())));
  if (i < 0) {
    // Keep what the file says, even where the menu has no such entry.
    if (v.is_string())
      c->addItem(QString::fromStdString(v.get<std::string>()), QString::fromStdString(v.get<std::string>()));
    else
      c->addItem(QString::fromStdString(v.dump()).left(40) + QStringLiteral(" (from the file)"), QVariant());
    i = c->count() - 1;
  }
  c->setCurrentIndex(i);
}

void set_widget(const Field& f, const json& v) {
  if (f.dist) {
    auto* mean = static_cast<QSpinBox*>(f.widget);
    if (v.is_number()) {
      mean->setValue(static_cast<int>(v.get<double>()));
      select_combo(f.dist, json("fixed"));
    } else if (v.is_object()) {
      mean->setValue(static_cast<int>(v.value("mean", 1.0)));
      select_combo(f.dist, json(v.value("dist", std::string("fixed"))));
    }
    return;
  }
  if (auto* s = qobject_cast<QSpinBox*>(f.widget)) {
    if (v.is_number())
      s->setValue(static_cast<int>(v.get<double>()));
    else if (v == json("auto") && !s->specialValueText().isEmpty())
      s->setValue(s->minimum());
  } else if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget)) {
    if (v.is_number()) d->setValue(v.get<double>());
  } else if (auto* check = qobject_cast<QCheckBox*>(f.widget)) {
    if (v.is_boolean()) check->setChecked(v.get<bool>());
  } else if (auto* box = qobject_cast<QComboBox*>(f.widget)) {
    select_combo(box, v);
  }
}

}  // namespace

ScenarioPanel::ScenarioPanel(QWidget* parent) : QWidget(parent), impl_(std::make_unique<Impl>()) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(build_shared_box());
  impl_->tabs = new QTabWidget;
  impl_->tabs->addTab(build_training_tab(), tr("Training"));
  impl_->tabs->addTab(build_serving_tab(), tr("Serving"));
  layout->addWidget(impl_->tabs);
  impl_->issues = new QLabel;
  impl_->issues->setObjectName(QStringLiteral("issues"));
  impl_->issues->setWordWrap(true);
  impl_->issues->setTextInteractionFlags(Qt::TextSelectableByMouse);
  impl_->issues->setStyleSheet(QStringLiteral("color: #a00000;"));
  layout->addWidget(impl_->issues);
  layout->addStretch(1);

  for (size_t i = 0; i < impl_->fields.size(); ++i) {
    const Field& f = impl_->fields[i];
    f.widget->setObjectName(QString::fromStdString(f.pointer));
    auto on_change = [this, i] {
      if (!impl_->filling) write_field(i);
    };
    if (auto* s = qobject_cast<QSpinBox*>(f.widget))
      connect(s, &QSpinBox::valueChanged, this, on_change);
    else if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget))
      connect(d, &QDoubleSpinBox::valueChanged, this, on_change);
    else if (auto* check = qobject_cast<QCheckBox*>(f.widget))
      connect(check, &QCheckBox::toggled, this, on_change);
    else if (auto* box = qobject_cast<QComboBox*>(f.widget))
      connect(box, &QComboBox::currentIndexChanged, this, on_change);
    if (f.dist) connect(f.dist, &QComboBox::currentIndexChanged, this, on_change);
  }
  connect(impl_->tabs, &QTabWidget::currentChanged, this, [this] { emit kind_changed(kind()); });
  fill_widgets();
}

ScenarioPanel::~ScenarioPanel() = default;

QWidget* ScenarioPanel::build_shared_box() {
  auto* box = new QGroupBox(tr("Model and system"));
  auto* form = new QFormLayout(box);
  std::vector<std::pair<QString, QVariant>> models;
  for (const auto& n : io::model_preset_names())
    models.emplace_back(QString::fromStdString(n), QString::fromStdString(n));
  impl_->model = combo(models);
  impl_->model_info = new QLabel;
  impl_->model_info->setObjectName(QStringLiteral("model_info"));
  std::vector<std::pair<QString, QVariant>> gpus;
  for (const auto& id : io::gpu_preset_ids()) gpus.emplace_back(QString::fromStdString(id), QString::fromStdString(id));
  impl_->gpu = combo(gpus);
  for (int i = 0; i < impl_->gpu->count(); ++i)
    impl_->gpu->setItemData(i, gpu_tooltip(impl_->gpu->itemData(i).toString().toStdString()), Qt::ToolTipRole);
  auto* num_gpus = spin(1, 1 << 20);
  auto* per_node = spin(1, 1024);
  auto* nic = new QDoubleSpinBox;
  nic->setRange(0, 10000);
  nic->setDecimals(0);
  nic->setKeyboardTracking(false);
  form->addRow(tr("Model"), impl_->model);
  form->addRow(QString(), impl_->model_info);
  form->addRow(tr("GPU"), impl_->gpu);
  form->addRow(tr("GPUs"), num_gpus);
  form->addRow(tr("GPUs per node"), per_node);
  form->addRow(tr("NIC Gb/s per GPU"), nic);
  auto& f = impl_->fields;
  f.push_back({"/model", Scope::shared, impl_->model, nullptr, json("llama3-8b")});
  f.push_back({"/system/gpu", Scope::shared, impl_->gpu, nullptr, json("h100-sxm5-80gb")});
  f.push_back({"/system/num_gpus", Scope::shared, num_gpus, nullptr, json(1)});
  f.push_back({"/system/gpus_per_node", Scope::shared, per_node, nullptr, json(8)});
  f.push_back({"/system/nic_gbps_per_gpu", Scope::shared, nic, nullptr, json(0)});
  return box;
}

QWidget* ScenarioPanel::build_training_tab() {
  auto* page = new QWidget;
  auto* form = new QFormLayout(page);
  auto& f = impl_->fields;
  auto add = [&](const char* label, const char* key, QWidget* w, json fallback, bool erase = false) {
    form->addRow(tr(label), w);
    f.push_back({std::string("/training/") + key, Scope::training, w, nullptr, std::move(fallback), erase});
  };
  add("Tensor parallel (tp)", "tp", spin(1, 4096), 1);
  add("Pipeline parallel (pp)", "pp", spin(1, 4096), 1);
  add("Virtual stages (vpp)", "vpp", spin(1, 256, "auto"), 1);
  add("Data parallel (dp)", "dp", spin(1, 1 << 20, "auto (GPUs / tp·pp·cp)"), "auto", true);
  add("Context parallel (cp)", "cp", spin(1, 1024), 1);
  add("Expert parallel (ep)", "ep", spin(1, 4096), 1);
  add("Sequence parallel (sp)", "sp", new QCheckBox, false);
  add("ZeRO stage", "zero", combo({{"auto", "auto"}, {"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}}), 0);
  add("Micro batch", "micro_batch", spin(1, 1 << 20, "auto"), "auto");
  add("Global batch", "global_batch", spin(1, 1 << 24), 1);
  add("Sequence length", "seq_len", spin(1, 1 << 24), 2048);
  add("Recompute", "recompute",
      combo({{"auto", "auto"}, {"none", "none"}, {"selective", "selective"}, {"full", "full"}}), "none");
  add("Precision", "precision", combo({{"bf16", "bf16"}, {"fp16", "fp16"}, {"fp8", "fp8"}}), "bf16");
  return page;
}

QWidget* ScenarioPanel::build_serving_tab() {
  auto* page = new QWidget;
  auto* form = new QFormLayout(page);
  auto& f = impl_->fields;
  auto add = [&](const QString& label, const char* key, QWidget* w, json fallback, bool erase = false,
                 QComboBox* dist = nullptr) {
    if (dist) {
      auto* row = new QWidget;
      auto* h = new QHBoxLayout(row);
      h->setContentsMargins(0, 0, 0, 0);
      h->addWidget(w, 1);
      h->addWidget(dist);
      form->addRow(label, row);
    } else {
      form->addRow(label, w);
    }
    f.push_back({std::string("/inference/") + key, Scope::inference, w, dist, std::move(fallback), erase});
  };
  add(tr("Tensor parallel (tp)"), "tp", spin(1, 1024), 1);
  add(tr("Weight dtype"), "weight_dtype",
      combo({{"bf16", "bf16"}, {"fp16", "fp16"}, {"fp8", "fp8"}, {"int8", "int8"}, {"int4", "int4"}}), "bf16");
  std::vector<std::pair<QString, QVariant>> names = {{tr("default (vLLM V1)"), QString()}};
  for (const auto& e : impl_->engines)
    if (std::none_of(names.begin(), names.end(),
                     [&](const auto& n) { return n.second.toString().toStdString() == e.name; }))
      names.emplace_back(QString::fromStdString(e.name), QString::fromStdString(e.name));
  impl_->engine_name = combo(names);
  impl_->engine_version = new QComboBox;
  // Version labels are long: they would set the editor's width (and push the window past
  // 1280 pixels); the drop-down list still shows them whole.
  impl_->engine_version->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  impl_->engine_version->setMinimumContentsLength(16);
  add(tr("Engine"), "engine/name", impl_->engine_name, "", true);
  add(tr("Engine version"), "engine/version", impl_->engine_version, "auto", true);
  impl_->mode = combo({{"offline", "offline"}, {"poisson", "poisson"}, {"concurrency", "concurrency"}});
  add(tr("Workload"), "workload/mode", impl_->mode, "offline");
  impl_->qps = new QDoubleSpinBox;
  impl_->qps->setRange(0.001, 1e6);
  impl_->qps->setDecimals(3);
  impl_->qps->setKeyboardTracking(false);
  add(tr("Requests/s (poisson)"), "workload/qps", impl_->qps, 1.0);
  impl_->concurrency = spin(1, 1 << 20);
  add(tr("Concurrency"), "workload/concurrency", impl_->concurrency, 1);
  add(tr("Requests"), "workload/num_requests", spin(1, 1 << 24), 100);
  auto dist = [] { return combo({{"fixed", "fixed"}, {"sharegpt", "sharegpt"}}); };
  add(tr("Input tokens (mean)"), "workload/input_tokens", spin(1, 1 << 24), 512, false, dist());
  add(tr("Output tokens (mean)"), "workload/output_tokens", spin(1, 1 << 24), 128, false, dist());
  return page;
}

void ScenarioPanel::refresh_engine_versions() {
  const std::string name = impl_->engine_name->currentData().toString().toStdString();
  const std::string want = name.empty() ? "vllm" : name;
  QComboBox* v = impl_->engine_version;
  v->clear();
  v->addItem(tr("auto (newest)"), QStringLiteral("auto"));
  for (const auto& e : impl_->engines)
    if (e.name == want && !e.from.empty())
      v->addItem(QString::fromStdString(e.from + "  " + e.label), QString::fromStdString(e.from));
  v->view()->setMinimumWidth(v->view()->sizeHintForColumn(0) + 24);
  for (int i = 0; i < v->count(); ++i) v->setItemData(i, v->itemText(i), Qt::ToolTipRole);
}

void ScenarioPanel::refresh_workload_enables() {
  const QString mode = impl_->mode->currentData().toString();
  impl_->qps->setEnabled(mode == QStringLiteral("poisson"));
  impl_->concurrency->setEnabled(mode == QStringLiteral("concurrency"));
}

void ScenarioPanel::refresh_model_info() {
  const json& m = impl_->training["model"];
  QString text;
  try {
    const ModelSpec spec = m.is_string() ? io::load_model(m.get<std::string>()) : io::model_from_hf_config(m, "/model");
    const ParamCounts p = count_params(spec);
    text = tr("%1 B parameters").arg(static_cast<double>(p.total) / 1e9, 0, 'f', 2);
    if (p.active != p.total) text += tr(", %1 B active per token").arg(static_cast<double>(p.active) / 1e9, 0, 'f', 2);
    text += tr(", %1 layers, hidden %2").arg(spec.layers).arg(spec.hidden);
  } catch (const std::exception&) {
    text = tr("model not readable");
  }
  impl_->model_info->setText(text);
}

void ScenarioPanel::refresh_gpu_tooltip() {
  impl_->gpu->setToolTip(impl_->gpu->currentData(Qt::ToolTipRole).toString());
}

void ScenarioPanel::fill_widgets() {
  impl_->filling = true;
  for (const Field& f : impl_->fields) {
    const json& doc = f.scope == Scope::inference ? impl_->serving : impl_->training;
    if (f.pointer == "/inference/engine/version") refresh_engine_versions();
    const json::json_pointer ptr(f.pointer);
    set_widget(f, doc.contains(ptr) ? doc[ptr] : f.fallback);
  }
  refresh_workload_enables();
  refresh_model_info();
  refresh_gpu_tooltip();
  impl_->filling = false;
}

void ScenarioPanel::write_field(size_t index) {
  const Field& f = impl_->fields[index];
  const std::optional<json> value = widget_value(f);
  if (!value) return;
  const bool erase = f.erase_when_auto && (*value == json("auto") || *value == json(""));
  const json::json_pointer ptr(f.pointer);
  auto apply = [&](json& doc) {
    if (erase) {
      if (doc.contains(ptr)) doc[ptr.parent_pointer()].erase(ptr.back());
    } else {
      doc[ptr] = *value;
    }
  };
  if (f.scope != Scope::inference) apply(impl_->training);
  if (f.scope != Scope::training) apply(impl_->serving);

  if (f.pointer == "/model") refresh_model_info();
  if (f.pointer == "/system/gpu") refresh_gpu_tooltip();
  if (f.pointer == "/inference/engine/name") {
    // Another engine: its newest profile, unless a version is picked again.
    impl_->filling = true;
    refresh_engine_versions();
    impl_->filling = false;
    write_field(impl_->index_of("/inference/engine/version"));
    return;
  }
  if (f.pointer == "/inference/workload/mode") {
    // The mode's own rate or concurrency, as the widgets show it.
    refresh_workload_enables();
    const std::string mode = value->get<std::string>();
    if (mode == "poisson") impl_->serving["inference"]["workload"]["qps"] = impl_->qps->value();
    if (mode == "concurrency") impl_->serving["inference"]["workload"]["concurrency"] = impl_->concurrency->value();
  }
  emit document_changed(f.scope == Scope::shared     ? kind()
                        : f.scope == Scope::training ? ScenarioKind::training
                                                     : ScenarioKind::inference);
}

const json& ScenarioPanel::document(ScenarioKind kind) const {
  return kind == ScenarioKind::training ? impl_->training : impl_->serving;
}

ScenarioKind ScenarioPanel::kind() const {
  return impl_->tabs->currentIndex() == 1 ? ScenarioKind::inference : ScenarioKind::training;
}

void ScenarioPanel::set_kind(ScenarioKind kind) {
  impl_->tabs->setCurrentIndex(kind == ScenarioKind::inference ? 1 : 0);
}

void ScenarioPanel::load_document(const json& doc) {
  ScenarioKind k = ScenarioKind::training;
  if (doc.contains("kind") && doc["kind"] == "inference")
    k = ScenarioKind::inference;
  else if (!doc.contains("kind") && doc.contains("inference") && !doc.contains("training"))
    k = ScenarioKind::inference;
  impl_->doc(k) = doc;
  json& other = impl_->doc(k == ScenarioKind::training ? ScenarioKind::inference : ScenarioKind::training);
  for (const char* key : {"model", "system"})
    if (doc.contains(key)) other[key] = doc[key];
  fill_widgets();
  if (kind() == k)
    emit document_changed(k);
  else
    set_kind(k);
}

void ScenarioPanel::show_issues(const std::vector<Issue>& issues) {
  QString text;
  if (!issues.empty()) {
    text = issues.size() == 1 ? tr("1 problem in the input:") : tr("%1 problems in the input:").arg(issues.size());
    for (const auto& line : issue_lines(issues)) text += QStringLiteral("\n  ") + QString::fromStdString(line);
  }
  impl_->issues->setText(text);
  const std::string section = kind() == ScenarioKind::training ? "/training" : "/inference";
  for (const Field& f : impl_->fields) {
    QString why;
    const bool mine = f.scope == Scope::shared || f.pointer.rfind(section, 0) == 0;
    for (const auto& i : issues)
      if (mine && (i.pointer == f.pointer || i.pointer.rfind(f.pointer + "/", 0) == 0))
        why += (why.isEmpty() ? QString() : QStringLiteral("\n")) + QString::fromStdString(format_issue(i));
    f.widget->setStyleSheet(why.isEmpty() ? QString() : QStringLiteral("background-color: #ffd0d0;"));
    f.widget->setToolTip(why);
    if (why.isEmpty() && f.widget == impl_->gpu) refresh_gpu_tooltip();
  }
}

void ScenarioPanel::show_message(const QString& text) {
  impl_->issues->setText(text);
}

QString ScenarioPanel::issue_text() const {
  return impl_->issues->text();
}

}  // namespace capsim::gui
