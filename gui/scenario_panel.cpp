#include "scenario_panel.hpp"

#include <QAbstractItemView>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QStyle>
#include <QStyleOptionComboBox>
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
    // The datasheet file names each figure's sources; the figures are the preset's.
    json facts = json::object(), sources = json::object();
    try {
      const json raw = io::read_json_file(io::data_dir() / "gpus" / (id + ".json"));
      if (raw.is_object() && raw.contains("facts") && raw["facts"].is_object()) facts = raw["facts"];
      if (raw.is_object() && raw.contains("sources") && raw["sources"].is_object()) sources = raw["sources"];
    } catch (const std::exception&) {
      // The figures alone, without their sources.
    }
    auto cited = [&](const char* fact) {
      QStringList ids;
      if (facts.contains(fact) && facts[fact].is_object() && facts[fact].contains("source") &&
          facts[fact]["source"].is_array())
        for (const json& s : facts[fact]["source"])
          if (s.is_string()) ids << QString::fromStdString(s.get<std::string>());
      return ids.isEmpty() ? QString() : QStringLiteral("  [%1]").arg(ids.join(QStringLiteral(", ")));
    };
    QString text = QString::fromStdString(g.name);
    text += QStringLiteral("\nBF16 dense %1 TFLOP/s%2").arg(g.peak_bf16_tflops).arg(cited("peak_bf16_tflops"));
    text += QStringLiteral("\nFP8 dense %1 TFLOP/s%2").arg(g.peak_fp8_tflops).arg(cited("peak_fp8_tflops"));
    text += QStringLiteral("\nHBM %1 GiB%2").arg(g.hbm_capacity_bytes / kGiB, 0, 'f', 1).arg(cited("hbm_capacity_bytes"));
    text += QStringLiteral("\nHBM bandwidth %1 GB/s%2").arg(g.hbm_bandwidth_gbps).arg(cited("hbm_bandwidth_gbps"));
    text += QStringLiteral("\nNVLink %1 GB/s per direction%2").arg(g.nvlink_bw_unidir_gbps).arg(cited("nvlink_bw_unidir_gbps"));
    text += QStringLiteral("\nPCIe %1 GB/s per direction%2").arg(g.pcie_bw_unidir_gbps).arg(cited("pcie_bw_unidir_gbps"));
    text += QStringLiteral("\nTDP %1 W%2").arg(g.tdp_w).arg(cited("tdp_w"));
    if (!sources.empty()) {
      text += QStringLiteral("\nSources (data/gpus/%1.json):").arg(QString::fromStdString(id));
      for (const auto& [key, src] : sources.items()) {
        std::string where;
        for (const char* k : {"url", "title"})
          if (where.empty() && src.is_object() && src.contains(k) && src[k].is_string()) where = src[k].get<std::string>();
        text += QStringLiteral("\n  %1: %2").arg(QString::fromStdString(key), QString::fromStdString(where));
      }
    }
    return text;
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
  QString auto_text;             ///< the "auto" entry's own text, before a resolved value is added
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
  bool model_readable = true;  ///< whether the model refresh_model_info last read did read
  QComboBox* gpu = nullptr;
  QComboBox* engine_name = nullptr;
  QComboBox* engine_version = nullptr;
  QComboBox* mode = nullptr;
  QDoubleSpinBox* qps = nullptr;
  QSpinBox* concurrency = nullptr;
  QLabel* trace_file = nullptr;        ///< the trace's file name
  QPushButton* trace_button = nullptr;

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
  if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget)) {
    if (!d->specialValueText().isEmpty() && d->value() == d->minimum()) return json("auto");
    return json(d->value());
  }
  if (auto* c = qobject_cast<QCheckBox*>(f.widget)) return json(c->isChecked());
  if (auto* e = qobject_cast<QLineEdit*>(f.widget)) {
    // A list of names ("q_proj, v_proj"), "auto", or nothing ("").
    const QString text = e->text().trimmed();
    if (text.isEmpty() || text == QStringLiteral("auto")) return json(text.toStdString());
    json names = json::array();
    for (const QString& w : text.split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts))
      names.push_back(w.toStdString());
    return names;
  }
  if (auto* c = qobject_cast<QComboBox*>(f.widget)) {
    const QVariant v = c->currentData();
    if (!v.isValid()) return std::nullopt;  // a value from the file the menu cannot write back
    if (v.typeId() == QMetaType::Int) return json(v.toInt());
    if (v.typeId() == QMetaType::Bool) return json(v.toBool());
    return json(v.toString().toStdString());
  }
  return std::nullopt;
}

void select_combo(QComboBox* c, const json& v) {
  int i = -1;
  if (v.is_boolean())
    i = c->findData(QVariant(v.get<bool>()));
  else if (v.is_number_integer())
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

/// A number of the file as the spin box can show it: clamped to its range (the document
/// keeps the file's value; the reader judges it).
int spin_value(const QSpinBox* s, const json& v) {
  const double lo = s->minimum(), hi = s->maximum();
  return static_cast<int>(std::clamp(v.get<double>(), lo, hi));
}

void set_widget(const Field& f, const json& v) {
  if (f.dist) {
    auto* mean = static_cast<QSpinBox*>(f.widget);
    if (v.is_number()) {
      mean->setValue(spin_value(mean, v));
      select_combo(f.dist, json("fixed"));
    } else if (v.is_object()) {
      // A file may hold anything here; the reader lists what is wrong with it.
      if (v.contains("mean") && v["mean"].is_number()) mean->setValue(spin_value(mean, v["mean"]));
      select_combo(f.dist, v.contains("dist") ? v["dist"] : json("fixed"));
    }
    return;
  }
  if (auto* s = qobject_cast<QSpinBox*>(f.widget)) {
    if (v.is_number())
      s->setValue(spin_value(s, v));
    else if (v == json("auto") && !s->specialValueText().isEmpty())
      s->setValue(s->minimum());
  } else if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget)) {
    if (v.is_number())
      d->setValue(v.get<double>());
    else if (v == json("auto") && !d->specialValueText().isEmpty())
      d->setValue(d->minimum());
  } else if (auto* check = qobject_cast<QCheckBox*>(f.widget)) {
    if (v.is_boolean()) check->setChecked(v.get<bool>());
  } else if (auto* box = qobject_cast<QComboBox*>(f.widget)) {
    select_combo(box, v);
  } else if (auto* e = qobject_cast<QLineEdit*>(f.widget)) {
    QStringList names;
    if (v.is_array())
      for (const json& n : v) names << (n.is_string() ? QString::fromStdString(n.get<std::string>())
                                                      : QString::fromStdString(n.dump()));
    e->setText(v.is_string() ? QString::fromStdString(v.get<std::string>()) : names.join(QStringLiteral(", ")));
  }
}

/// Make every object above `ptr` an object, so that the key can be written: a file may
/// hold anything there (the reader lists it as a problem). A length given as a number
/// becomes {"mean": n, "dist": "fixed"}, the same length; anything else an empty object.
void make_parents(json& doc, const json::json_pointer& ptr) {
  if (!doc.is_object()) doc = json::object();
  std::vector<json::json_pointer> above;
  for (json::json_pointer p = ptr.parent_pointer(); !p.empty(); p = p.parent_pointer()) above.push_back(p);
  for (auto it = above.rbegin(); it != above.rend(); ++it) {
    if (!doc.contains(*it)) return;  // operator[] makes the rest
    json& v = doc[*it];
    if (v.is_object()) continue;
    const bool length = it->back() == "input_tokens" || it->back() == "output_tokens";
    v = length && v.is_number() ? json{{"mean", v}, {"dist", "fixed"}} : json::object();
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
    if (f.dist) f.dist->setObjectName(QString::fromStdString(f.pointer + "/dist"));
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
    else if (auto* e = qobject_cast<QLineEdit*>(f.widget))
      connect(e, &QLineEdit::editingFinished, this, [this, i] {
        // Only a changed text is an edit (focus leaving the field is not).
        if (impl_->filling) return;
        const json::json_pointer ptr(impl_->fields[i].pointer);
        const json& doc = impl_->training;
        if (widget_value(impl_->fields[i]) != (doc.contains(ptr) ? doc[ptr] : json(""))) write_field(i);
      });
    if (f.dist) connect(f.dist, &QComboBox::currentIndexChanged, this, on_change);
  }
  for (Field& f : impl_->fields) {
    if (auto* s = qobject_cast<QSpinBox*>(f.widget)) {
      f.auto_text = s->specialValueText();
    } else if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget)) {
      f.auto_text = d->specialValueText();
    } else if (auto* c = qobject_cast<QComboBox*>(f.widget)) {
      int i = c->findData(QStringLiteral("auto"));
      if (i < 0) i = c->findData(QString());
      if (i >= 0) f.auto_text = c->itemText(i);
      // The entry grows by what it resolves to ("default -> recompute"): the menu is as
      // wide as its longest such text from the start, so that the editor's width has room
      // for it (none is clipped). Menus given a fixed length (the engine version's, whose
      // entries are file names) keep it.
      if (i >= 0 && c->sizeAdjustPolicy() == QComboBox::AdjustToContentsOnFirstShow) {
        int text = 0;
        for (int j = 0; j < c->count(); ++j)
          text = std::max(text, c->fontMetrics().horizontalAdvance(
                                    j == i ? c->itemText(j) : c->itemText(i) + QStringLiteral(" \u2192 ") + c->itemText(j)));
        QStyleOptionComboBox opt;
        opt.initFrom(c);
        opt.frame = true;
        c->setMinimumWidth(
            c->style()->sizeFromContents(QStyle::CT_ComboBox, &opt, QSize(text, c->fontMetrics().height()), c).width());
      }
    }
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
  // A config.json path can be long: it must not set the editor's width.
  impl_->model->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  impl_->model->setMinimumContentsLength(16);
  impl_->model_info = new QLabel;
  impl_->model_info->setWordWrap(true);
  impl_->model_info->setObjectName(QStringLiteral("model_info"));
  std::vector<std::pair<QString, QVariant>> gpus;
  for (const auto& id : io::gpu_preset_ids()) gpus.emplace_back(QString::fromStdString(id), QString::fromStdString(id));
  impl_->gpu = combo(gpus);
  for (int i = 0; i < impl_->gpu->count(); ++i)
    impl_->gpu->setItemData(i, gpu_tooltip(impl_->gpu->itemData(i).toString().toStdString()), Qt::ToolTipRole);
  auto* num_gpus = spin(1, 1 << 20);
  auto* per_node = spin(1, 1024);
  auto* nic = new QDoubleSpinBox;
  nic->setRange(-1, 10000);  // -1: "auto", the GPU's reference node
  nic->setSpecialValueText(QStringLiteral("auto"));
  nic->setDecimals(0);
  nic->setKeyboardTracking(false);
  auto* open_hf = new QPushButton(tr("Open HF config..."));
  open_hf->setObjectName(QStringLiteral("open_hf_config"));
  open_hf->setToolTip(tr("Use a Hugging Face config.json as the model (its path goes into the scenario)"));
  connect(open_hf, &QPushButton::clicked, this, &ScenarioPanel::hf_config_requested);
  auto* model_row = new QWidget;
  auto* model_h = new QHBoxLayout(model_row);
  model_h->setContentsMargins(0, 0, 0, 0);
  model_h->addWidget(impl_->model, 1);
  model_h->addWidget(open_hf);
  form->addRow(tr("Model"), model_row);
  form->addRow(QString(), impl_->model_info);
  form->addRow(tr("GPU"), impl_->gpu);
  form->addRow(tr("GPUs"), num_gpus);
  form->addRow(tr("GPUs per node"), per_node);
  form->addRow(tr("NIC Gb/s per GPU"), nic);
  auto& f = impl_->fields;
  f.push_back({"/model", Scope::shared, impl_->model, nullptr, json("llama3-8b"), false, {}});
  f.push_back({"/system/gpu", Scope::shared, impl_->gpu, nullptr, json("h100-sxm5-80gb"), false, {}});
  f.push_back({"/system/num_gpus", Scope::shared, num_gpus, nullptr, json(1), false, {}});
  f.push_back({"/system/gpus_per_node", Scope::shared, per_node, nullptr, json(8), false, {}});
  f.push_back({"/system/nic_gbps_per_gpu", Scope::shared, nic, nullptr, json(0), false, {}});
  return box;
}

namespace {

/// Two columns of short labels and editors (the panel is narrow); the label's tooltip
/// names the field in full with its key in the scenario file.
class Grid {
 public:
  explicit Grid(QWidget* page) : g_(new QGridLayout(page)) {
    g_->setColumnStretch(1, 1);
    g_->setColumnStretch(3, 1);
    g_->setHorizontalSpacing(8);
    g_->setVerticalSpacing(3);
  }
  /// The next cell of the two columns.
  void add(const QString& label, QWidget* w, const QString& tip) {
    place(label, w, tip, col_ * 2, 1);
    if (++col_ == 2) next_row();
  }
  /// A row of its own, across both columns.
  void add_wide(const QString& label, QWidget* w, const QString& tip) {
    if (col_ != 0) next_row();
    place(label, w, tip, 0, 3);
    next_row();
  }
  /// Keep the rows at the top.
  void finish() { g_->setRowStretch(row_ + 1, 1); }

 private:
  void next_row() {
    col_ = 0;
    ++row_;
  }
  void place(const QString& label, QWidget* w, const QString& tip, int col, int span) {
    auto* l = new QLabel(label);
    l->setToolTip(tip);
    l->setBuddy(w);
    g_->addWidget(l, row_, col);
    g_->addWidget(w, row_, col + 1, 1, span);
  }
  QGridLayout* g_;
  int row_ = 0, col_ = 0;
};

QDoubleSpinBox* dspin(double lo, double hi, int decimals, double step, const char* special = nullptr) {
  auto* d = new QDoubleSpinBox;
  d->setRange(lo, hi);
  d->setDecimals(decimals);
  d->setSingleStep(step);
  if (special) d->setSpecialValueText(QString::fromUtf8(special));
  d->setKeyboardTracking(false);
  return d;
}

/// An engine knob left to the profile's default ("" erases the key), or set on or off.
QComboBox* tri_state() {
  return combo({{QStringLiteral("default"), QString()}, {QStringLiteral("on"), true}, {QStringLiteral("off"), false}});
}

std::vector<std::pair<QString, QVariant>> choices(std::initializer_list<const char*> names) {
  std::vector<std::pair<QString, QVariant>> out;
  for (const char* n : names) out.emplace_back(QString::fromUtf8(n), QString::fromUtf8(n));
  return out;
}

}  // namespace

QWidget* ScenarioPanel::build_training_tab() {
  auto* page = new QWidget;
  Grid grid(page);
  auto& f = impl_->fields;
  auto add = [&](const char* label, const char* key, QWidget* w, json fallback, const char* what, bool erase = false) {
    grid.add(tr(label), w,
             tr(what) + QStringLiteral(" (training.%1)")
                            .arg(QString::fromUtf8(key).replace(QLatin1Char('/'), QLatin1Char('.'))));
    f.push_back({std::string("/training/") + key, Scope::training, w, nullptr, std::move(fallback), erase, {}});
  };
  add("tp", "tp", spin(1, 4096, "auto"), 1, "Tensor parallel; auto: the fastest layout that fits");
  add("pp", "pp", spin(1, 4096, "auto"), 1, "Pipeline parallel");
  add("vpp", "vpp", spin(1, 256, "auto"), 1, "Virtual pipeline stages per rank");
  add("dp", "dp", spin(1, 1 << 20, "auto"), "auto", "Data parallel; auto: GPUs / (tp x pp x cp)", true);
  add("cp", "cp", spin(1, 1024, "auto"), 1, "Context parallel");
  add("ep", "ep", spin(1, 4096, "auto"), 1, "Expert parallel");
  add("etp", "etp", spin(1, 4096, "auto"), 1, "Expert tensor parallel");
  add("sp", "sp", combo({{QStringLiteral("off"), false}, {QStringLiteral("on"), true}, {QStringLiteral("auto"), QStringLiteral("auto")}}),
      false, "Sequence parallel; auto: on with tp > 1");
  add("ZeRO", "zero", combo({{"auto", "auto"}, {"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}}), 0, "ZeRO stage");
  add("Micro batch", "micro_batch", spin(1, 1 << 20, "auto"), "auto", "Micro batch (sequences)");
  add("Global batch", "global_batch", spin(1, 1 << 24), 1, "Global batch (sequences)");
  add("Seq length", "seq_len", spin(1, 1 << 24), 2048, "Sequence length (tokens)");
  add("Documents", "document_tokens", spin(1, 1 << 24, "whole sequence"), "auto",
      "Packed sequences: mean tokens of the documents each sequence holds, attention running within each", true);
  add("Recompute", "recompute", combo(choices({"auto", "none", "selective", "full"})), "none",
      "Activation recomputation");
  add("Precision", "precision", combo(choices({"auto", "bf16", "fp16", "fp8"})), "bf16",
      "Mixed precision; auto: the faster of bf16 and fp8 that fits");
  add("FP8 recipe", "fp8_recipe", combo(choices({"auto", "tensorwise", "blockwise"})), "auto",
      "FP8 scaling recipe (precision fp8 only)");
  add("FP8 params", "fp8_param_gather", tri_state(), "",
      "GEMM weights kept and gathered in FP8 (Megatron fp8_param_gather); default: on for per-tensor FP8 on the "
      "Megatron stack",
      true);
  add("Schedule", "schedule", combo(choices({"auto", "1f1b", "gpipe", "zb-h1", "dualpipe"})), "1f1b",
      "Pipeline schedule");
  add("Framework", "framework", combo(choices({"auto", "megatron", "pytorch"})), "auto", "Training framework");
  add("Loss", "loss", combo(choices({"auto", "eager", "compiled"})), "auto",
      "The PyTorch stack's cross entropy: eager F.cross_entropy on an fp32 copy of the logits, or under torch.compile "
      "(torchtitan with --training.compile since April 2025); the Megatron stack runs its own fused kernel",
      true);
  add("Attention", "attention", combo(choices({"auto", "fused", "cudnn", "flash2", "flash1", "flash-triton", "unfused"})), "auto", "Attention kernel");
  add("Optimizer", "optimizer", combo(choices({"adamw", "adam", "sgd", "adafactor", "lion", "adam8bit", "auto"})), "adamw",
      "Optimizer");
  add("Moments", "optimizer_moments", combo(choices({"auto", "fp32", "bf16"})), "auto",
      "Optimizer moment precision; auto: fp32, or bf16 in Megatron pre-training where full-precision states would "
      "force recomputation");
  add("Grad reduce", "grad_reduce_dtype", combo(choices({"auto", "fp32", "bf16", "fp16"})), "auto",
      "Dtype gradients accumulate and reduce in: fp32, or the training's 16-bit dtype (bf16 under bf16 and fp8, "
      "fp16 under fp16); auto: fp32 unless training in fp16, or bf16 beside the 16-bit moments of an auto Moments");
  add("Mode", "mode",
      combo(choices({"pretrain", "sft", "lora", "qlora", "ppo", "grpo", "dpo", "simpo", "orpo", "distill"})),
      "pretrain", "Training mode");
  // The adapters of modes lora and qlora (training.lora).
  add("LoRA rank", "lora/rank", spin(1, 65536, "auto"), "auto", "Adapter rank; auto: the framework's default");
  add("LoRA alpha", "lora/alpha", dspin(0, 65536, 1, 1, "none"), "auto",
      "Adapter scaling alpha (does not change the step's cost)", true);
  auto* targets = new QLineEdit;
  targets->setPlaceholderText(QStringLiteral("q_proj, v_proj, ... or auto"));
  add("LoRA targets", "lora/targets", targets, "",
      "Modules with adapters: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or auto");
  add("LoRA base", "lora/base_dtype",
      combo({{"default", ""}, {"bf16", "bf16"}, {"fp16", "fp16"}, {"nf4", "nf4"}, {"int8", "int8"}, {"fp8", "fp8"}}),
      "", "Storage of the frozen base's linear weights (nf4 for QLoRA)", true);
  add("Double quant", "lora/double_quant", new QCheckBox, false, "NF4 with double quantization of the absmax constants");
  add("LoRA dropout", "lora/dropout", dspin(-0.01, 0.99, 2, 0.05, "auto"), "auto",
      "Dropout on the adapters' input (0 to 0.99); auto: the framework's default (PyTorch/LitGPT 0.05, Megatron/NeMo 0)",
      true);
  add("Offload opt.", "offload_optimizer", new QCheckBox, false, "Optimizer state offloaded to the CPU (ZeRO-Offload)");
  add("Overlap DP", "overlap_dp", new QCheckBox, true, "Data-parallel gradient communication overlaps the backward");
  add("TP overlap", "tp_comm_overlap", dspin(-0.01, 1, 2, 0.05, "auto"), "auto",
      "Share of tensor-parallel communication hidden behind compute (0 to 1), or auto: "
      "Transformer Engine's userbuffers overlap where the Megatron stack runs it",
      true);
  add("MoE skew", "moe_imbalance", dspin(1, 64, 2, 0.05), 1.0,
      "Tokens at the busiest expert over the mean (1: balanced)");
  add("Dispatcher", "moe_dispatcher", combo(choices({"auto", "alltoall", "hierarchical"})), "auto",
      "How routed tokens cross expert-parallel ranks: alltoall (every copy, Megatron-Core's alltoall) or "
      "hierarchical (once per destination node, then NVLink: DeepEP, HybridEP); auto: hierarchical for "
      "node-limited routing",
      true);
  add("EP overlap", "ep_overlap", tri_state(), "",
      "Expert-parallel all-to-all hidden behind another microbatch's computation (Megatron-Core "
      "overlap_moe_expert_parallel_comm); default: off",
      true);
  add("Train tokens", "train_tokens", dspin(0, 1e16, 0, 1e9, "none"), "auto",
      "Tokens to train on: the report adds the days, GPU-hours, cost and energy", true);
  add("$/GPU-hour", "usd_per_gpu_hour", dspin(0, 1000, 2, 0.1, "none"), "auto",
      "Price of a GPU-hour for the budget's cost", true);
  add("PUE", "pue", dspin(1, 3, 2, 0.05), 1.0, "Power usage effectiveness for the budget's energy");
  add("Effective time", "effective_training_fraction", dspin(0, 1, 3, 0.01, "auto"), "auto",
      "Share of the run's wall clock that trains; auto: interruptions in proportion to the GPUs "
      "(the Llama 3 report's >90% on 16,384 GPUs)",
      true);
  grid.finish();
  return page;
}

QWidget* ScenarioPanel::build_serving_tab() {
  auto* page = new QWidget;
  Grid grid(page);
  auto& f = impl_->fields;
  auto add = [&](const QString& label, const char* key, QWidget* w, json fallback, const QString& what,
                 bool erase = false, QComboBox* dist = nullptr, bool wide = false) {
    const QString tip =
        what +
        QStringLiteral(" (inference.%1)").arg(QString::fromUtf8(key).replace(QLatin1Char('/'), QLatin1Char('.')));
    if (dist) {
      auto* row = new QWidget;
      auto* h = new QHBoxLayout(row);
      h->setContentsMargins(0, 0, 0, 0);
      h->addWidget(w, 1);
      h->addWidget(dist);
      grid.add_wide(label, row, tip);
    } else if (wide) {
      grid.add_wide(label, w, tip);
    } else {
      grid.add(label, w, tip);
    }
    f.push_back({std::string("/inference/") + key, Scope::inference, w, dist, std::move(fallback), erase, {}});
  };
  const auto dtypes = [] { return combo(choices({"bf16", "fp16", "fp8", "int8", "int4"})); };
  add(tr("tp"), "tp", spin(1, 1024, "auto"), 1, tr("Tensor parallel; auto: the GPUs left by pp and the replicas"));
  add(tr("pp"), "pp", spin(1, 1024, "auto"), 1, tr("Pipeline parallel; auto: the GPUs left by tp and the replicas"));
  add(tr("ep"), "ep", spin(1, 1024, "auto"), 1, tr("Expert parallel"));
  add(tr("Replicas"), "replicas", spin(1, 1 << 20, "auto"), 1, tr("Model replicas behind the router; auto: as many as the GPUs hold"));
  const auto dtypes_or_auto = [&] {
    auto* c = dtypes();
    c->insertItem(0, QStringLiteral("auto"), QStringLiteral("auto"));
    return c;
  };
  add(tr("Weights"), "weight_dtype", dtypes_or_auto(), "bf16", tr("Weight data type; auto: the checkpoint's (FP8 for FP8 checkpoints)"));
  add(tr("Activations"), "activation_dtype", dtypes_or_auto(), "bf16",
      tr("Activation data type; auto: FP8 with FP8 weights where the GPU has FP8 tensor cores"));
  add(tr("KV cache"), "kv_dtype", dtypes_or_auto(), "bf16", tr("KV-cache data type"));
  add(tr("GPU memory"), "engine/gpu_memory_utilization", dspin(0, 1, 2, 0.01, "default"), "auto",
      tr("Share of GPU memory the engine takes (gpu_memory_utilization)"), true);
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
  add(tr("Engine"), "engine/name", impl_->engine_name, "", tr("Serving engine"), true, nullptr, true);
  add(tr("Version"), "engine/version", impl_->engine_version, "auto", tr("Engine release (its profile)"), true, nullptr,
      true);
  refresh_engine_versions();  // its "auto" entry, before the auto texts are taken
  add(tr("Max seqs"), "engine/max_num_seqs", spin(1, 1 << 20, "default"), "auto",
      tr("Most sequences in a batch (max_num_seqs)"), true);
  add(tr("Batch tokens"), "engine/max_num_batched_tokens", spin(1, 1 << 24, "default"), "auto",
      tr("Most tokens in a step (max_num_batched_tokens)"), true);
  add(tr("Max model len"), "engine/max_model_len", spin(1, 1 << 24, "default"), "auto",
      tr("Longest sequence the server admits (--max-model-len); default: the model's context"), true);
  add(tr("Block size"), "engine/block_size", spin(1, 4096, "default"), "auto", tr("KV-cache block (tokens)"), true);
  add(tr("Preemption"), "engine/preemption",
      combo({{QStringLiteral("default"), QString()},
             {QStringLiteral("recompute"), QStringLiteral("recompute")},
             {QStringLiteral("swap"), QStringLiteral("swap")},
             {QStringLiteral("partial"), QStringLiteral("partial")},
             {QStringLiteral("cached"), QStringLiteral("cached")}}),
      "", tr("What a preempted sequence does with its KV cache"), true);
  add(tr("Chunked prefill"), "engine/chunked_prefill", tri_state(), "", tr("Chunked prefill"), true);
  add(tr("CUDA graphs"), "engine/cuda_graphs", tri_state(), "", tr("Decode steps replayed as CUDA graphs"), true);
  impl_->mode = combo(choices({"offline", "poisson", "concurrency", "trace"}));
  add(tr("Workload"), "workload/mode", impl_->mode, "offline", tr("Arrivals: all at once, Poisson, or closed loop"));
  add(tr("Requests"), "workload/num_requests", spin(1, 1 << 24), 100, tr("Requests simulated per run"));
  impl_->qps = dspin(0.001, 1e6, 3, 1.0);
  add(tr("Requests/s"), "workload/qps", impl_->qps, 1.0, tr("Poisson arrival rate"));
  impl_->concurrency = spin(1, 1 << 20);
  add(tr("Concurrency"), "workload/concurrency", impl_->concurrency, 1, tr("Requests in flight (closed loop)"));
  add(tr("Prefix hits"), "workload/prefix_hit_rate", dspin(0, 0.99, 2, 0.05), 0.0,
      tr("Share of prompt tokens found in the prefix cache (0 to 0.99)"));
  // The trace a "trace" workload replays: a file, chosen in a dialog (the window's).
  auto* trace_row = new QWidget;
  auto* trace_h = new QHBoxLayout(trace_row);
  trace_h->setContentsMargins(0, 0, 0, 0);
  impl_->trace_file = new QLabel;
  impl_->trace_file->setObjectName(QStringLiteral("trace_file"));
  impl_->trace_button = new QPushButton(tr("File..."));
  impl_->trace_button->setObjectName(QStringLiteral("open_trace_file"));
  connect(impl_->trace_button, &QPushButton::clicked, this, &ScenarioPanel::trace_file_requested);
  trace_h->addWidget(impl_->trace_button);
  trace_h->addWidget(impl_->trace_file, 1);
  grid.add(tr("Trace"), trace_row,
           tr("Requests to replay (CSV or JSON Lines) for the \"trace\" workload (inference.workload.trace_file)"));
  auto dist = [] { return combo(choices({"fixed", "uniform", "sharegpt"})); };
  add(tr("Input tokens"), "workload/input_tokens", spin(1, 1 << 24), 512, tr("Prompt length: mean and distribution"),
      false, dist());
  add(tr("Input min"), "workload/input_tokens/min", spin(1, 1 << 24), 1, tr("Shortest prompt (uniform)"));
  add(tr("Input max"), "workload/input_tokens/max", spin(1, 1 << 24), 1023, tr("Longest prompt (uniform)"));
  add(tr("Output tokens"), "workload/output_tokens", spin(1, 1 << 24), 128, tr("Output length: mean and distribution"),
      false, dist());
  add(tr("Output min"), "workload/output_tokens/min", spin(1, 1 << 24), 1, tr("Shortest output (uniform)"));
  add(tr("Output max"), "workload/output_tokens/max", spin(1, 1 << 24), 255, tr("Longest output (uniform)"));
  add(tr("SLO TTFT ms"), "slo/ttft_ms", dspin(0, 1e7, 1, 10), 500.0,
      tr("Time to first token a request must meet to count as goodput"));
  add(tr("SLO TPOT ms"), "slo/tpot_ms", dspin(0, 1e7, 1, 1), 50.0,
      tr("Time per output token a request must meet to count as goodput"));
  grid.finish();
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

void ScenarioPanel::refresh_lora_enables() {
  // The adapter fields matter to modes lora and qlora (or to a file that has the block).
  const json& t = impl_->training;
  const json::json_pointer mode_ptr("/training/mode"), lora_ptr("/training/lora");
  const json mode = t.contains(mode_ptr) ? t[mode_ptr] : json();
  const bool on = mode == json("lora") || mode == json("qlora") || t.contains(lora_ptr);
  for (const Field& f : impl_->fields)
    if (f.pointer.rfind("/training/lora/", 0) == 0) f.widget->setEnabled(on);
}

void ScenarioPanel::refresh_workload_enables() {
  const QString mode = impl_->mode->currentData().toString();
  impl_->qps->setEnabled(mode == QStringLiteral("poisson"));
  impl_->concurrency->setEnabled(mode == QStringLiteral("concurrency"));
  impl_->trace_button->setEnabled(mode == QStringLiteral("trace"));
  const json::json_pointer trace("/inference/workload/trace_file");
  const json& doc = impl_->serving;
  const QString file = doc.contains(trace) && doc[trace].is_string()
                           ? QString::fromStdString(doc[trace].get<std::string>())
                           : QString();
  impl_->trace_file->setText(file.isEmpty() ? tr("(none)") : QFileInfo(file).fileName());
  impl_->trace_file->setToolTip(file);
  // Bounds mean something for a uniform length only.
  for (const char* length : {"/inference/workload/input_tokens", "/inference/workload/output_tokens"}) {
    const size_t i = impl_->index_of(length);
    if (i == impl_->fields.size()) continue;
    const bool uniform = impl_->fields[i].dist->currentData().toString() == QStringLiteral("uniform");
    for (const char* bound : {"/min", "/max"}) {
      const size_t b = impl_->index_of(std::string(length) + bound);
      if (b < impl_->fields.size()) impl_->fields[b].widget->setEnabled(uniform);
    }
  }
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
    impl_->model_readable = true;
  } catch (const std::exception&) {
    text = tr("model not readable (the problem is listed below)");
    impl_->model_readable = false;
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
  refresh_lora_enables();
  refresh_model_info();
  refresh_gpu_tooltip();
  impl_->filling = false;
}

void ScenarioPanel::write_field(size_t index) {
  const Field& f = impl_->fields[index];
  const std::optional<json> value = widget_value(f);
  if (!value) return;
  const bool erase = (f.erase_when_auto && (*value == json("auto") || *value == json(""))) ||
                     (qobject_cast<QLineEdit*>(f.widget) && *value == json(""));
  const json::json_pointer ptr(f.pointer);
  auto apply = [&](json& doc) {
    make_parents(doc, ptr);
    if (erase) {
      if (doc.contains(ptr)) doc[ptr.parent_pointer()].erase(ptr.back());
    } else if (f.dist && doc.contains(ptr) && doc[ptr].is_object()) {
      doc[ptr].update(*value);  // the file's other keys (min, max) stay
    } else {
      doc[ptr] = *value;
    }
  };
  if (f.scope != Scope::inference) apply(impl_->training);
  if (f.scope != Scope::training) apply(impl_->serving);

  if (f.pointer == "/model") refresh_model_info();
  if (f.pointer.rfind("/training/mode", 0) == 0 || f.pointer.rfind("/training/lora/", 0) == 0) refresh_lora_enables();
  if (f.pointer == "/system/gpu") refresh_gpu_tooltip();
  if (f.pointer == "/inference/engine/name") {
    // Another engine: its newest profile, unless a version is picked again.
    impl_->filling = true;
    refresh_engine_versions();
    impl_->filling = false;
    write_field(impl_->index_of("/inference/engine/version"));
    return;
  }
  if (f.dist) {
    // A uniform length needs its bounds: those the editor shows, unless the file has them.
    refresh_workload_enables();
    json& length = impl_->serving[ptr];
    if (f.dist->currentData().toString() == QStringLiteral("uniform"))
      for (const char* bound : {"min", "max"}) {
        if (length.contains(bound)) continue;
        const size_t b = impl_->index_of(f.pointer + "/" + bound);
        length[bound] = static_cast<QSpinBox*>(impl_->fields[b].widget)->value();
      }
  }
  if (f.pointer == "/inference/workload/mode") {
    // The mode's own rate or concurrency, as the widgets show it.
    refresh_workload_enables();
    const std::string mode = value->get<std::string>();
    if (mode == "poisson") impl_->serving["inference"]["workload"]["qps"] = impl_->qps->value();
    if (mode == "concurrency") impl_->serving["inference"]["workload"]["concurrency"] = impl_->concurrency->value();
  }
  if (f.scope == Scope::shared) {
    // The model and the system belong to both documents: the one behind its tab changed
    // too (its results are stale), then the one in front.
    const ScenarioKind front = kind();
    emit document_changed(front == ScenarioKind::training ? ScenarioKind::inference : ScenarioKind::training);
    emit document_changed(front);
    return;
  }
  emit document_changed(f.scope == Scope::training ? ScenarioKind::training : ScenarioKind::inference);
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
  // The other document took the file's model and system: its results are stale too.
  emit document_changed(k == ScenarioKind::training ? ScenarioKind::inference : ScenarioKind::training);
  emit document_changed(k);
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

void ScenarioPanel::show_resolved(ScenarioKind kind, const json& values) {
  const std::string section = kind == ScenarioKind::training ? "/training/" : "/inference/";
  for (const Field& f : impl_->fields) {
    // The NIC rate sits with the system but resolves with either kind's run.
    const bool mine = f.pointer.rfind(section, 0) == 0 || f.pointer == "/system/nic_gbps_per_gpu";
    if (f.auto_text.isEmpty() || !mine) continue;
    // The value's key: the field's own (its last part for engine knobs), the profile for the version.
    std::string key = f.pointer.substr(f.pointer.rfind('/') + 1);
    if (f.pointer == "/inference/engine/version") key = "engine_profile";
    if (f.pointer == "/inference/engine/name") key.clear();
    QString text = f.auto_text;
    const std::optional<json> now = widget_value(f);
    if ((now == json("auto") || now == json("")) && !key.empty() && values.is_object() && values.contains(key)) {
      const json& v = values[key];
      const QString shown = v.is_string()    ? QString::fromStdString(v.get<std::string>())
                            : v.is_boolean() ? (v.get<bool>() ? QStringLiteral("on") : QStringLiteral("off"))
                                             : QString::fromStdString(v.dump());
      text += QStringLiteral(" \u2192 ") + shown;
    }
    if (auto* s = qobject_cast<QSpinBox*>(f.widget)) {
      s->setSpecialValueText(text);
    } else if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget)) {
      d->setSpecialValueText(text);
    } else if (auto* c = qobject_cast<QComboBox*>(f.widget)) {
      int i = c->findData(QStringLiteral("auto"));
      if (i < 0) i = c->findData(QString());
      if (i >= 0) c->setItemText(i, text);
    }
  }
}

QString ScenarioPanel::shown_text(const QString& pointer) const {
  for (const Field& f : impl_->fields) {
    if (f.dist && QString::fromStdString(f.pointer + "/dist") == pointer) return f.dist->currentText();
    if (QString::fromStdString(f.pointer) != pointer) continue;
    if (auto* s = qobject_cast<QSpinBox*>(f.widget)) return s->text();
    if (auto* d = qobject_cast<QDoubleSpinBox*>(f.widget)) return d->text();
    if (auto* c = qobject_cast<QComboBox*>(f.widget)) return c->currentText();
    if (auto* c = qobject_cast<QCheckBox*>(f.widget))
      return c->isChecked() ? QStringLiteral("true") : QStringLiteral("false");
  }
  return {};
}

void ScenarioPanel::set_trace_file(const QString& path) {
  json& doc = impl_->serving;
  const json::json_pointer ptr("/inference/workload/trace_file");
  make_parents(doc, ptr);
  doc[ptr] = QFileInfo(path).absoluteFilePath().toStdString();
  refresh_workload_enables();
  emit document_changed(ScenarioKind::inference);
}

bool ScenarioPanel::open_hf_config(const QString& path) {
  const QFileInfo info(path);
  const QString abs = info.absoluteFilePath();
  QComboBox* m = impl_->model;
  if (m->findData(abs) < 0) {
    m->addItem(info.dir().dirName() + QLatin1Char('/') + info.fileName(), abs);
    m->setItemData(m->count() - 1, abs, Qt::ToolTipRole);
  }
  // The document names the file, as a scenario for the command line does.
  impl_->filling = true;
  m->setCurrentIndex(m->findData(abs));
  impl_->filling = false;
  write_field(impl_->index_of("/model"));
  return impl_->model_readable;
}

void ScenarioPanel::show_message(const QString& text) {
  impl_->issues->setText(text);
}

QString ScenarioPanel::issue_text() const {
  return impl_->issues->text();
}

}  // namespace capsim::gui
