#include "ui/views/units_view.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDir>
#include <QContextMenuEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QRadioButton>
#include <QSpinBox>
#include <QScrollArea>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>


#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/model/backward.h"
#include "core/model/hooks.h"
#include "core/model/model.h"
#include "core/model/thread_scope.h"
#include "ui/base/background.h"
#include "ui/base/deliver.h"
#include "ui/controller/loaded_dashboards.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/selection.h"
#include "ui/views/sae_edit_panel.h"
#include "ui/views/view_text.h"
#include "ui/widgets/activation_strip.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"
#include "ui/widgets/target_picker.h"
#include "ui/widgets/unit_dashboard.h"

namespace hs::ui {
namespace {

// The ends of the diverging map (ColorBrewer RdBu), as the Attribution view colours signed values.
QColor signedColor(double v) { return v >= 0 ? QColor(0xb2, 0x18, 0x2b) : QColor(0x21, 0x66, 0xac); }

QLabel* textLabel(QWidget* parent, const QString& name) {
  auto* label = new QLabel(parent);
  label->setObjectName(name);
  label->setWordWrap(true);
  label->setTextInteractionFlags(Qt::TextSelectableByMouse);
  return label;
}

QTableWidget* makeTable(QWidget* parent, const QString& name, const QStringList& headers) {
  auto* table = new QTableWidget(0, static_cast<int>(headers.size()), parent);
  table->setObjectName(name);
  table->setHorizontalHeaderLabels(headers);
  table->verticalHeader()->setVisible(false);
  table->verticalHeader()->setDefaultSectionSize(table->fontMetrics().height() + 6);
  table->horizontalHeader()->setStretchLastSection(true);
  table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table->setSelectionBehavior(QAbstractItemView::SelectRows);
  table->setSelectionMode(QAbstractItemView::SingleSelection);
  return table;
}

QTableWidgetItem* numberItem(double v, bool coloured) {
  auto* item = new QTableWidgetItem(coloured ? formatSigned(v) : formatNumber(v));
  item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  if (coloured && v != 0) item->setForeground(signedColor(v));
  return item;
}

// What does not depend on the chosen unit, kept for the next requests of the same run, source,
// position and metric (choosing another unit, Export All's figures): a few entries, newest last.
struct MemoEntry {
  std::weak_ptr<const hs::ActivationCache> cache;
  QString source;
  int pos = -1;
  std::optional<int32_t> target, versus;
  std::shared_ptr<const UnitsBase> base;
};
std::mutex memo_mutex;
std::vector<MemoEntry> memo;
const QString kNoDashboards = QStringLiteral(
    "Scan a data set to see this unit's top examples: File &gt; Scan Data Set with unit dashboards, or "
    "headscope-cli scan --units, then File &gt; Open Unit Dashboards….");

constexpr size_t kMemoEntries = 4;

std::shared_ptr<const UnitsBase> findMemo(const std::shared_ptr<const hs::ActivationCache>& cache, const QString& source,
                                          const AnalysisKey& key) {
  std::lock_guard lock(memo_mutex);
  for (const MemoEntry& e : memo)
    if (e.cache.lock() == cache && e.source == source && e.pos == key.pos && e.target == key.target &&
        e.versus == key.versus)
      return e.base;
  return nullptr;
}

void addMemo(const std::shared_ptr<const hs::ActivationCache>& cache, const QString& source, const AnalysisKey& key,
             std::shared_ptr<const UnitsBase> base) {
  std::lock_guard lock(memo_mutex);
  std::erase_if(memo, [](const MemoEntry& e) { return e.cache.expired(); });
  memo.push_back({cache, source, key.pos, key.target, key.versus, std::move(base)});
  if (memo.size() > kMemoEntries) memo.erase(memo.begin());
}

// The latents of the rows last encoded, per SAE (the newest few). A keystroke changes the
// prompt from the key's position on; the hook's rows before it are the same bits as on the
// previous run (the forward pass reuses that prefix), so a row whose input is bit for bit the one
// encoded before keeps its latents, and only the rows after it are encoded: at the end of a
// prompt one or two rows instead of all of them (docs/benchmarks.md, 4 December). The rows are
// compared, not assumed: whatever made them equal, equal inputs have the same latents.
struct EncodedRows {
  std::weak_ptr<const hs::Sae> sae;
  hs::RowMatrixXf x;                     // [pos, d_in] the input rows encoded
  std::weak_ptr<const UnitsBase> latents;  // whose acts [pos, d_sae] are their latents (shared, not copied)
};
std::mutex encoded_mutex;
std::vector<EncodedRows> encoded;
constexpr size_t kEncodedEntries = 2;

// The latents of x's rows [pos, d_sae]: the rows equal to those last encoded for this SAE are
// that base's (shared), the others encoded.
UnitActs encodeReusingRows(const std::shared_ptr<const hs::Sae>& sae, const hs::RowMatrixXf& x) {
  const Eigen::Index n = x.rows(), d_in = x.cols();
  Eigen::Index same = 0;
  std::shared_ptr<const UnitsBase> before;
  {
    std::lock_guard lock(encoded_mutex);
    for (const EncodedRows& e : encoded) {
      if (e.sae.lock() != sae || e.x.cols() != d_in) continue;
      before = e.latents.lock();
      if (!before || before->acts.rows() != e.x.rows()) {
        before.reset();  // dropped from the memo: encode it all
        break;
      }
      const Eigen::Index m = std::min(n, e.x.rows());
      while (same < m && std::memcmp(x.row(same).data(), e.x.row(same).data(), sizeof(float) * d_in) == 0) ++same;
      break;
    }
  }
  const hs::RowMatrixXf rest = x.bottomRows(n - same);  // [pos - same, d_in]
  return UnitActs(before ? before->acts : UnitActs(), same, same < n ? hs::sae_encode(*sae, rest) : hs::RowMatrixXf(0, sae->d_sae));
}

// The next keystroke reuses `base`'s latents of the rows x (base->acts, held by the base as long
// as the memo or a view holds it).
void rememberEncoded(const std::shared_ptr<const hs::Sae>& sae, const hs::RowMatrixXf& x,
                     const std::shared_ptr<const UnitsBase>& base) {
  std::lock_guard lock(encoded_mutex);
  std::erase_if(encoded, [&](const EncodedRows& e) { return e.sae.expired() || e.sae.lock() == sae; });
  encoded.push_back({sae, x, base});
  if (encoded.size() > kEncodedEntries) encoded.erase(encoded.begin());
}

// The source of a key: "L2" (neurons of layer 2) or the SAE's id; and the unit asked for (-1: none).
QString keySource(UnitKind kind, const AnalysisKey& key) {
  return kind == UnitKind::Neuron ? QStringLiteral("L%1").arg(key.layer) : key.params.value(0);
}
int keyUnit(UnitKind kind, const AnalysisKey& key) {
  bool ok = false;
  const int unit = key.params.value(kind == UnitKind::Neuron ? 0 : 1).toInt(&ok);
  return ok ? unit : -1;
}

// Whether a latent's output passes a norm before it joins the stream: an SAE writing attn.hook_z
// or mlp.hook_post on a model with post-attention or post-MLP norms (hook_attn_out and
// hook_mlp_out are after them).
bool latentPassesPostNorm(const hs::ActivationCache& cache, const hs::Sae& sae) {
  const auto out = hs::parse_hook_key(cache.config(), sae.hook_out);
  if (!out || out->layer < 0) return false;
  if (out->hook == hs::HookPoint::Z || out->hook == hs::HookPoint::Result) return cache.has_post_norm(1);
  if (out->hook == hs::HookPoint::MlpPost) return cache.has_post_norm(2);
  return false;
}

}  // namespace

ViewDescriptor UnitsView::neuronsDescriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("neurons");
  d.title = QStringLiteral("Neurons");
  d.menu_text = QStringLiteral("&Neurons");
  d.help = QStringLiteral("the selected layer's MLP neurons at the selected position, by activation and by "
                          "attribution to the target; a neuron's activations over the prompt and its logit effects");
  d.export_size = QSize(1300, 820);
  d.options = {{kNeuron, QStringLiteral("N"), QStringLiteral("the neurons view's neuron (of the --head layer)"),
                ViewOption::Type::Integer, {}}};
  d.analysis.id = d.id;
  d.analysis.reads = kReadsLayer | kReadsPosition | kReadsTarget | kReadsVersus;
  // A backward pass costs about a forward pass: its own job while the view is on screen, never
  // delaying the run (as the Attribution view's).
  d.analysis.with_every_run = false;
  d.analysis.compute = [](const RunResult& run, const AnalysisKey& key) {
    return std::shared_ptr<ViewResult>(compute(UnitKind::Neuron, run, key));
  };
  d.create = [](Selection* selection, QWidget* parent) { return new UnitsView(UnitKind::Neuron, selection, parent); };
  return d;
}

ViewDescriptor UnitsView::featuresDescriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("features");
  d.title = QStringLiteral("Features");
  d.menu_text = QStringLiteral("&Features");
  d.help = QStringLiteral("a loaded sparse autoencoder's latents at the selected position (needs --sae DIR), by "
                          "activation and by attribution to the target; a latent's activations and logit effects");
  d.export_size = QSize(1300, 820);
  d.options = {{kFeature, QStringLiteral("N"), QStringLiteral("the features view's latent"), ViewOption::Type::Integer, {}},
               {kFeatureSae, QStringLiteral("K"),
                QStringLiteral("the features view's SAE: the K-th loaded, counting from 0 (default 0)"),
                ViewOption::Type::Integer, {}}};
  d.analysis.id = d.id;
  d.analysis.reads = kReadsPosition | kReadsTarget | kReadsVersus;
  d.analysis.with_every_run = false;
  d.analysis.compute = [](const RunResult& run, const AnalysisKey& key) {
    return std::shared_ptr<ViewResult>(compute(UnitKind::Latent, run, key));
  };
  d.create = [](Selection* selection, QWidget* parent) { return new UnitsView(UnitKind::Latent, selection, parent); };
  return d;
}

UnitActs::UnitActs(const hs::RowMatrixXf& all) : UnitActs(UnitActs(), 0, all) {}

UnitActs::UnitActs(const UnitActs& before, Eigen::Index n, const hs::RowMatrixXf& rest)
    : rows_(before.rows_.begin(), before.rows_.begin() + n), cols_(rest.cols()) {
  rows_.reserve(static_cast<size_t>(n + rest.rows()));
  for (Eigen::Index p = 0; p < rest.rows(); ++p) rows_.push_back(std::make_shared<const hs::RowVectorXf>(rest.row(p)));
}

hs::RowMatrixXf UnitActs::dense() const {
  hs::RowMatrixXf m(rows(), cols_);  // [pos, n_units]
  for (Eigen::Index p = 0; p < rows(); ++p) m.row(p) = row(p);
  return m;
}

std::shared_ptr<const UnitsAttribution> UnitsView::computeAttribution(const UnitsBase& b) {
  if (auto done = b.attribution()) return done;
  auto a = std::make_shared<UnitsAttribution>();
  if (b.kind == UnitKind::Latent && b.sae && b.plain) {
    const hs::ActivationCache& cache = *b.plain;
    const hs::Sae& sae = *b.sae;
    const int pos = b.target.pos;
    const auto out = hs::parse_hook_key(cache.config(), sae.hook_out);
    if (out && out->hook != hs::HookPoint::Logits) {
      hs::GradOptions options;
      options.keep = {out->hook};
      // The caller's team (the view's job: one thread, ThreadScope), not backward()'s own choice by
      // size, which is both cores for GPT-2 small at any length (auto_threads).
      options.threads = std::max(1, omp_get_max_threads());
      const hs::GradientCache grad = hs::backward(cache, b.target.metric, options);
      if (grad.has(out->hook, out->layer)) {
        // Attribution is position-local (the decoder is linear in one position's latents), so
        // only the selected position's row is differentiated: 1/pos of the product over d_sae.
        hs::SaeRun at;
        at.sae_in = hs::hook_rows(cache, sae.hook_in).row(pos);
        at.feature_acts = b.acts.row(pos);
        const hs::RowMatrixXf grad_out = grad.rows(out->hook, out->layer).row(pos);  // [1, d_out]
        a->attribution = hs::latent_attribution(sae, at, grad_out).row(0);
      } else {
        a->note = QStringLiteral("The metric does not depend on %1 (it is after the metric's position "
                                 "or on another branch), so no latent is attributed anything.")
                      .arg(QString::fromStdString(sae.hook_out));
      }
    } else {
      a->note = QStringLiteral("No gradient is taken at %1, the hook this SAE writes.")
                    .arg(QString::fromStdString(sae.hook_out));
    }
  }
  if (a->attribution.size() != b.acts.cols()) a->attribution = hs::RowVectorXf::Zero(b.acts.cols());
  a->by_attribution = hs::top_units(a->attribution, kTopUnits, true);
  b.setAttribution(std::move(a));
  return b.attribution();
}

std::shared_ptr<UnitsResult> UnitsView::compute(UnitKind kind, const RunResult& run, const AnalysisKey& key) {
  auto r = std::make_shared<UnitsResult>();
  r->ablations_left_out = !run.ablations().empty();
  // Gradients explain a plain run (backward() refuses edits): the units are read on the run without
  // its ablations, and the view says so.
  const std::shared_ptr<const hs::ActivationCache>& plain = run.plainCache();
  const hs::ActivationCache& cache = *plain;
  const QString source = keySource(kind, key);

  // Latents: the SAE must still be loaded, and fit this run's model, even for a kept result.
  std::optional<LoadedSae> entry;
  if (kind == UnitKind::Latent) {
    if (source.isEmpty()) {
      r->message = QStringLiteral("No sparse autoencoder is loaded.");
      return r;
    }
    entry = LoadedSaes::instance().entry(source);
    if (!entry) {
      r->message = QStringLiteral("That sparse autoencoder was unloaded.");
      return r;
    }
    try {
      hs::check_sae_fits(*entry->sae, cache.config());
    } catch (const hs::Error& e) {
      r->message = QStringLiteral("%1 does not fit this model: %2").arg(entry->label, QString::fromUtf8(e.what()));
      return r;
    }
  }

  std::shared_ptr<const UnitsBase> base = findMemo(plain, source, key);
  if (!base) {
    auto b = std::make_shared<UnitsBase>();
    b->kind = kind;
    b->plain = plain;
    if (entry) {
      b->sae = entry->sae;
      b->sae_id = entry->id;
      b->sae_label = entry->label;
    }
    b->target = hs::target_metric(cache, key.pos, key.target, key.versus);
    b->top = hs::top_predictions(cache, b->target.pos, kTargetChoices);
    const int pos = b->target.pos;
    hs::RowMatrixXf sae_in;  // latents: the SAE's input rows [pos, d_in]
    if (kind == UnitKind::Neuron) {
      b->layer = key.layer;
      b->acts = UnitActs(hs::neuron_activations(cache, key.layer));  // [pos, d_mlp]
      hs::GradOptions options;
      options.keep = {hs::kNeuronHook};
      const hs::GradientCache grad = hs::backward(cache, b->target.metric, options);
      auto a = std::make_shared<UnitsAttribution>();
      a->attribution = hs::neuron_attribution(cache, grad, key.layer).row(pos);
      a->by_attribution = hs::top_units(a->attribution, kTopUnits, true);
      b->setAttribution(std::move(a));
      b->post_norm = cache.has_post_norm(2);
    } else {
      // The latents only (encoded for every position: TopK needs each row's full product); the
      // attributions, a backward pass, are the second stage (computeAttribution), so that the
      // activations are shown without waiting for it.
      sae_in = hs::hook_rows(cache, b->sae->hook_in);  // [pos, d_in]
      b->acts = encodeReusingRows(b->sae, sae_in);   // [pos, d_sae]
      b->post_norm = latentPassesPostNorm(cache, *b->sae);
    }
    b->by_activation = hs::top_units(b->acts.row(pos), kTopUnits, false);
    if (kind == UnitKind::Latent) rememberEncoded(b->sae, sae_in, b);
    addMemo(plain, source, key, b);
    base = std::move(b);
  }
  r->base = base;
  const int unit = keyUnit(kind, key);
  r->unit_chosen = unit >= 0 && unit < base->n_units();
  r->unit = r->unit_chosen ? unit : (base->by_activation.empty() ? -1 : base->by_activation.front());
  if (r->unit >= 0) {
    try {
      const hs::Weights& weights = *cache.weights();
      const hs::RowVectorXf direction = kind == UnitKind::Neuron
                                            ? hs::neuron_output_direction(weights, base->layer, r->unit)
                                            : hs::latent_output_direction(weights, *base->sae, r->unit);
      r->effects = hs::logit_effects(weights, direction, kTopTokens);
    } catch (const hs::Error& e) {
      r->effects_error = QString::fromUtf8(e.what());
    }
  }
  return r;
}

UnitsView::UnitsView(UnitKind kind, Selection* selection, QWidget* parent) : AnalysisView(selection, parent), kind_(kind) {
  const bool neurons = kind_ == UnitKind::Neuron;
  setObjectName(neurons ? QStringLiteral("neuronsView") : QStringLiteral("featuresView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);

  title_ = textLabel(this, QStringLiteral("viewTitle"));
  layout->addWidget(title_);

  auto* source_row = new QHBoxLayout;
  source_row->setSpacing(10);
  source_ = new QComboBox(this);
  source_->setObjectName(neurons ? QStringLiteral("neuronLayerCombo") : QStringLiteral("saeCombo"));
  source_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  source_->setMinimumContentsLength(neurons ? 6 : 24);
  source_->setToolTip(neurons ? QStringLiteral("The layer whose MLP neurons are listed (the selected layer: Page Up / "
                                               "Page Down move it too).")
                              : QStringLiteral("The loaded sparse autoencoder whose latents are listed. File > Open "
                                               "Sparse Autoencoder loads more."));
  source_row->addWidget(new QLabel(neurons ? QStringLiteral("Layer:") : QStringLiteral("SAE:"), this));
  source_row->addWidget(source_);
  unit_box_ = new QSpinBox(this);
  unit_box_->setObjectName(QStringLiteral("unitBox"));
  unit_box_->setRange(-1, 0);
  unit_box_->setSpecialValueText(QStringLiteral("top"));
  unit_box_->setToolTip(neurons ? QStringLiteral("The neuron shown on the right: type its number, or click one in the "
                                                 "table (“top”: the most active at the position).")
                                : QStringLiteral("The latent shown on the right: type its number, or click one in the "
                                                 "table (“top”: the most active at the position)."));
  unit_box_->setKeyboardTracking(false);
  source_row->addWidget(new QLabel(neurons ? QStringLiteral("Neuron:") : QStringLiteral("Latent:"), this));
  source_row->addWidget(unit_box_);
  source_row->addSpacing(12);
  source_row->addWidget(new QLabel(QStringLiteral("List by:"), this));
  by_activation_ = new QRadioButton(QStringLiteral("activation"), this);
  by_activation_->setObjectName(QStringLiteral("sortByActivation"));
  by_attribution_ = new QRadioButton(QStringLiteral("|attribution|"), this);
  by_attribution_->setObjectName(QStringLiteral("sortByAttribution"));
  by_attribution_->setToolTip(QStringLiteral("activation × ∂M/∂activation at the position, M the target's logit "
                                             "(or logit difference) as in the Attribution view"));
  by_activation_->setChecked(true);
  auto* sort_group = new QButtonGroup(this);
  sort_group->addButton(by_activation_);
  sort_group->addButton(by_attribution_);
  source_row->addWidget(by_activation_);
  source_row->addWidget(by_attribution_);
  source_row->addStretch(1);
  layout->addLayout(source_row);

  auto* target_row = new QHBoxLayout;
  target_row->setSpacing(10);
  target_ = new TargetPicker(QStringLiteral("Attribution to:"), this);
  target_->combo()->setObjectName(QStringLiteral("unitsTargetCombo"));
  target_->combo()->setToolTip(QStringLiteral("The token whose logit the attributions explain (shared with the "
                                              "Contributions and Attribution views)."));
  versus_ = new TargetPicker(QStringLiteral("minus the logit of:"), this);
  versus_->combo()->setObjectName(QStringLiteral("unitsVersusCombo"));
  resolveTypedTokens({target_, versus_}, [this] { return run_.get(); });
  target_row->addWidget(target_);
  target_row->addWidget(versus_);
  target_row->addStretch(1);
  layout->addLayout(target_row);

  status_ = textLabel(this, QStringLiteral("unitsStatus"));
  status_->setTextFormat(Qt::RichText);
  layout->addWidget(status_);
  message_ = textLabel(this, QStringLiteral("unitsMessage"));
  message_->setTextFormat(Qt::RichText);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::LinksAccessibleByMouse);
  connect(message_, &QLabel::linkActivated, this, [this](const QString& link) {
    if (link != QStringLiteral("load-shipped") || !run_) return;
    LoadedSaes::instance().requestLoadShipped(QString::fromStdString(run_->run.model->dir().string()));
    message_->setText(QStringLiteral("<b>Loading this model's sparse autoencoders…</b>"));
  });
  layout->addWidget(message_);

  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->setChildrenCollapsible(false);
  auto* left = new QWidget(splitter);
  auto* left_layout = new QVBoxLayout(left);
  left_layout->setContentsMargins(0, 0, 0, 0);
  left_layout->setSpacing(2);
  table_caption_ = textLabel(left, QStringLiteral("sectionCaption"));
  table_ = makeTable(left, QStringLiteral("unitTable"),
                     {neurons ? QStringLiteral("neuron") : QStringLiteral("latent"), QStringLiteral("activation"),
                      QStringLiteral("attribution")});
  table_->setContextMenuPolicy(Qt::CustomContextMenu);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // the columns share the width
  table_->setMinimumWidth(300);
  left_layout->addWidget(table_caption_);
  left_layout->addWidget(table_, 1);
  if (kind_ == UnitKind::Latent) {  // edits of the shown latent, and the SAE's quality (issue 25 item 3)
    edit_panel_ = new SaeEditPanel(selection, left);
    left_layout->addWidget(edit_panel_);
  }

  auto* right = new QWidget(splitter);
  auto* right_layout = new QVBoxLayout(right);
  right_layout->setContentsMargins(0, 0, 0, 0);
  right_layout->setSpacing(2);
  strip_caption_ = textLabel(right, QStringLiteral("sectionCaption"));
  strip_ = new ActivationStrip(right);
  strip_->setObjectName(QStringLiteral("unitStrip"));
  strip_->setTooltipFormat(QStringLiteral("%1 (%2): activation %3\nclick: select this position"));
  effects_caption_ = textLabel(right, QStringLiteral("sectionCaption"));
  auto* effects_row = new QHBoxLayout;
  effects_row->setSpacing(8);
  top_tokens_ = makeTable(right, QStringLiteral("topTokens"), {QStringLiteral("raises"), QStringLiteral("logit effect")});
  bottom_tokens_ =
      makeTable(right, QStringLiteral("bottomTokens"), {QStringLiteral("lowers"), QStringLiteral("logit effect")});
  for (QTableWidget* t : {top_tokens_, bottom_tokens_}) {
    t->setSelectionMode(QAbstractItemView::NoSelection);
    t->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    t->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    t->setMinimumHeight(6 * t->verticalHeader()->defaultSectionSize());  // they scroll below ten rows
    effects_row->addWidget(t);
  }
  dashboard_box_ = new QGroupBox(QStringLiteral("Dashboard"), right);
  auto* dash_layout = new QVBoxLayout(dashboard_box_);
  dashboard_ = textLabel(dashboard_box_, QStringLiteral("dashboardEmpty"));
  dashboard_->setText(kNoDashboards);
  dashboard_->setAlignment(Qt::AlignCenter);
  dashboard_->setTextFormat(Qt::RichText);
  dashboard_->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::LinksAccessibleByMouse);
  connect(dashboard_, &QLabel::linkActivated, this, [this](const QString& link) {
    if (link == QStringLiteral("build") && !dashboard_units_.isEmpty()) LoadedDashboards::instance().requestBuild(dashboard_units_);
  });
  connect(&LoadedDashboards::instance(), &LoadedDashboards::buildChanged, this, [this] {
    if (!dashboard_units_.isEmpty()) updateDashboard(dashboard_unit_);
  });
  dash_layout->addWidget(dashboard_);
  dashboard_widget_ = new UnitDashboardWidget;
  auto* dash_scroll = dashboard_scroll_ = new QScrollArea(dashboard_box_);
  dash_scroll->setObjectName(QStringLiteral("dashboardScroll"));
  dash_scroll->setWidgetResizable(true);
  dash_scroll->setFrameShape(QFrame::NoFrame);
  dash_scroll->setWidget(dashboard_widget_);
  dash_scroll->hide();
  dash_layout->addWidget(dash_scroll, 1);
  connect(&LoadedDashboards::instance(), &LoadedDashboards::changed, this, [this] {
    dashboard_wanted_ = {QString(), -1};
    refreshUnit();
  });
  right_layout->addWidget(strip_caption_);
  right_layout->addWidget(strip_);
  right_layout->addSpacing(6);
  right_layout->addWidget(effects_caption_);
  right_layout->addLayout(effects_row, 3);
  right_layout->addSpacing(6);
  right_layout->addWidget(dashboard_box_, 1);
  right_layout_ = right_layout;
  dashboard_box_->setMinimumHeight(70);
  splitter->addWidget(left);
  splitter->addWidget(right);
  splitter->setStretchFactor(0, 2);
  splitter->setStretchFactor(1, 3);
  splitter->setSizes({340, 660});
  layout->addWidget(splitter, 1);

  connect(source_, qOverload<int>(&QComboBox::activated), this, [this](int index) {
    if (kind_ == UnitKind::Neuron) {
      selection_->setLayer(source_->itemData(index).toInt());
    } else {
      chooseSae(source_->itemData(index).toString());
    }
  });
  connect(unit_box_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int unit) {
    if (unit != unit_) chooseUnit(unit);
  });
  connect(by_activation_, &QRadioButton::toggled, this, [this] { refreshTable(); });
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int) {
    if (QTableWidgetItem* item = table_->item(row, 0)) chooseUnit(item->data(Qt::UserRole).toInt());
  });
  connect(table_, &QWidget::customContextMenuRequested, this, [this](const QPoint& at) {
    QMenu menu(this);
    menu.addAction(QStringLiteral("Save Table as CSV…"), this, [this] { saveTableCsv(); });
    menu.exec(table_->viewport()->mapToGlobal(at));
  });
  connect(strip_, &ActivationStrip::tokenClicked, selection_, &Selection::setPosition);
  connect(target_, &TargetPicker::targetChosen, selection_, &Selection::setTarget);
  connect(versus_, &TargetPicker::targetChosen, selection_, &Selection::setVersus);
  connect(selection_, &Selection::headChanged, this, [this] {
    if (kind_ == UnitKind::Neuron) {
      QSignalBlocker block(source_);
      source_->setCurrentIndex(source_->findData(selection_->layer()));
      // Neuron numbers belong to a layer: another layer starts at its top neuron.
      if (result_ && result_->base && result_->base->layer != selection_->layer() && unit_ >= 0) {
        unit_ = -1;
        QSignalBlocker block_unit(unit_box_);
        unit_box_->setValue(-1);
      }
    }
    updateStatus();
  });
  connect(selection_, &Selection::positionChanged, this, [this](int pos) {
    strip_->setOutlined(pos);
    updateStatus();
  });
  connect(selection_, &Selection::targetChanged, this, [this] { updateStatus(); });
  if (kind_ == UnitKind::Latent) connect(&LoadedSaes::instance(), &LoadedSaes::changed, this, [this] { refreshSources(); });
  refresher_ = new RefreshWhenShown(this, [this] {
    refreshTargets();
    refresh();
  });
  refreshSources();
  refresh();
}

UnitsView::~UnitsView() {
  waitForJobs(in_flight_);  // never waitForFinished: it would run a queued job here (background.h)
}

int UnitsView::shownUnit() const { return result_ ? result_->unit : -1; }

void UnitsView::chooseUnit(int unit) {
  unit_ = unit < 0 ? -1 : unit;
  {
    QSignalBlocker block(unit_box_);
    unit_box_->setValue(unit_);
  }
  if (run_) model_ = run_->run.model.get();
  // The strip follows at once from the activations at hand; the logit effects come with the
  // analysis the window now asks for.
  refreshUnit();
  Q_EMIT analysisKeyChanged();
  updateStatus();
}

void UnitsView::chooseSae(const QString& id) {
  if (id == sae_id_) return;
  sae_id_ = id;
  unit_ = -1;
  {
    QSignalBlocker block(unit_box_);
    unit_box_->setValue(-1);
  }
  {
    QSignalBlocker block(source_);
    source_->setCurrentIndex(source_->findData(id));
  }
  Q_EMIT analysisKeyChanged();
  updateStatus();
}

bool UnitsView::showUnit(const UnitRef& unit) {
  if ((kind_ == UnitKind::Neuron) != unit.neuron || unit.unit < 0) return false;
  if (kind_ == UnitKind::Neuron) {
    if (unit.layer < 0 || unit.layer >= selection_->layerCount()) return false;
    selection_->setLayer(unit.layer);
  } else {
    if (!LoadedSaes::instance().find(unit.sae_id)) return false;
    chooseSae(unit.sae_id);
  }
  if (unit.pos >= 0 && unit.pos < selection_->positionCount()) selection_->setPosition(unit.pos);
  chooseUnit(unit.unit);
  return true;
}

bool UnitsView::sortByAttribution() const { return by_attribution_->isChecked(); }
void UnitsView::setSortByAttribution(bool by_attribution) {
  (by_attribution ? by_attribution_ : by_activation_)->setChecked(true);
}

void UnitsView::refreshSources() {
  QSignalBlocker block(source_);
  source_->clear();
  if (kind_ == UnitKind::Neuron) {
    const int n_layer = run_ ? run_->n_layer() : 0;
    for (int l = 0; l < n_layer; ++l) source_->addItem(QStringLiteral("L%1 MLP").arg(l), l);
    source_->setCurrentIndex(source_->findData(selection_->layer()));
    return;
  }
  const std::vector<LoadedSae> saes = LoadedSaes::instance().list();
  for (const LoadedSae& s : saes) {
    source_->addItem(s.label, s.id);
    source_->setItemData(source_->count() - 1, QDir::toNativeSeparators(s.folder), Qt::ToolTipRole);
  }
  source_->setEnabled(!saes.empty());
  QString wanted = sae_id_;
  if (sae_index_input_ >= 0 && sae_index_input_ < static_cast<int>(saes.size())) {
    wanted = saes[static_cast<size_t>(sae_index_input_)].id;
    sae_index_input_ = -1;
  }
  if (source_->findData(wanted) < 0) wanted = saes.empty() ? QString() : saes.front().id;
  source_->setCurrentIndex(source_->findData(wanted));
  if (wanted != sae_id_) {
    block.unblock();
    chooseSae(wanted);
    if (result_ && result_->base && result_->base->sae_id != sae_id_) refresher_->request();
  }
}

AnalysisKey UnitsView::analysisKey(AnalysisKey selected) const {
  const int unit = model_ && run_ && run_->run.model.get() != model_ ? -1 : unit_;
  if (kind_ == UnitKind::Neuron) selected.params = {QString::number(unit)};
  else selected.params = {sae_id_, QString::number(unit)};
  return selected;
}

ViewInputs UnitsView::viewInputs() const {
  ViewInputs inputs;
  if (unit_ >= 0) inputs[kind_ == UnitKind::Neuron ? kNeuron : kFeature] = unit_;
  if (kind_ == UnitKind::Latent && !sae_id_.isEmpty()) {
    const std::vector<LoadedSae> saes = LoadedSaes::instance().list();
    for (size_t i = 0; i < saes.size(); ++i)
      if (saes[i].id == sae_id_) inputs[kFeatureSae] = static_cast<int>(i);
  }
  return inputs;
}

void UnitsView::setViewInputs(const ViewInputs& inputs) {
  const QString name = kind_ == UnitKind::Neuron ? kNeuron : kFeature;
  unit_ = inputs.contains(name) ? std::max(-1, inputs.value(name).toInt()) : -1;
  {
    QSignalBlocker block(unit_box_);
    unit_box_->setMaximum(std::max(unit_box_->maximum(), unit_));
    unit_box_->setValue(unit_);
  }
  if (kind_ == UnitKind::Latent && inputs.contains(kFeatureSae)) {
    sae_index_input_ = inputs.value(kFeatureSae).toInt();
    refreshSources();
  }
  Q_EMIT analysisKeyChanged();
}

void UnitsView::setRun(std::shared_ptr<const RunResult> run) {
  const bool new_model = !run_ || !run || run_->run.model != run->run.model;
  run_ = std::move(run);
  if (new_model) {
    if (kind_ == UnitKind::Neuron) refreshSources();
    if (model_ && run_ && run_->run.model.get() != model_) {
      // A unit chosen on another model names nothing on this one.
      unit_ = -1;
      model_ = nullptr;
      QSignalBlocker block(unit_box_);
      unit_box_->setValue(-1);
    }
  }
  updateStatus();  // says at once that what is drawn is of the previous prompt
}

void UnitsView::setResult(std::shared_ptr<const ViewResult> result) {
  auto r = std::dynamic_pointer_cast<const UnitsResult>(std::move(result));
  // A late answer for an earlier run is never drawn over the current one; nor one of an SAE that
  // is no longer loaded.
  if (!r || (run_ && r->run_job != run_->job)) return;
  if (r->base && r->base->kind == UnitKind::Latent && !LoadedSaes::instance().find(r->base->sae_id)) return;
  result_ = std::move(r);
  run_ = result_->run;
  if (edit_panel_) edit_panel_->setResult(result_);
  failure_.clear();
  startAttribution();
  refresher_->request();
}

bool UnitsView::attributionPending() const {
  if (!result_ || !result_->base) return false;
  const auto attr = result_->base->attribution();
  return !attr || attr != shown_attribution_;
}

void UnitsView::startAttribution() {
  if (!result_ || !result_->base || result_->base->attribution() || attribution_job_ == result_->base) return;
  // One job at a time: a newer result waits for the one in flight, then starts its own (a
  // superseded base's attributions are still kept in it, for its memo).
  if (attribution_job_) return;
  attribution_job_ = result_->base;
  // Out of the next keystroke's way: the background pool's one low-priority thread (background.h).
  QFuture<bool> done = runInBackground([base = attribution_job_] {
    try {
      computeAttribution(*base);
      return true;
    } catch (const std::exception&) {
      return false;  // reported below: the base stays without attributions
    }
  });
  std::erase_if(in_flight_, [](const QFuture<void>& f) { return f.isFinished(); });
  in_flight_.push_back(QFuture<void>(done));
  deliverLater(done, this, [this, base = attribution_job_](bool) {
    attribution_job_.reset();
    if (result_ && result_->base == base) {
      if (!base->attribution()) {
        failure_ = QStringLiteral("The attributions could not be computed.");
        updateStatus();
        return;
      }
      refreshTable();
      updateStatus();
    } else {
      startAttribution();  // the shown result changed meanwhile
    }
  });
}

void UnitsView::showFailure(const QString& message) {
  failure_ = message;
  updateStatus();
}

bool UnitsView::isCurrent() const {
  if (!result_ || !run_ || result_->run_job != run_->job) return false;
  const ViewDescriptor d = kind_ == UnitKind::Neuron ? neuronsDescriptor() : featuresDescriptor();
  return result_->key == analysisKey(keyFromSelection(*selection_, d.analysis.reads));
}

QString UnitsView::statusText() const { return status_->text(); }
QString UnitsView::messageText() const { return message_->text(); }

QString UnitsView::unitName(int unit) const {
  if (kind_ == UnitKind::Neuron) {
    const int layer = result_ && result_->base ? result_->base->layer : selection_->layer();
    return QStringLiteral("L%1 neuron %2").arg(layer).arg(unit);
  }
  return QStringLiteral("latent %1").arg(unit);
}

QString UnitsView::sourceTitle() const {
  if (!result_ || !result_->base) return kind_ == UnitKind::Neuron ? QStringLiteral("Neurons") : QStringLiteral("Features");
  const UnitsBase& b = *result_->base;
  if (b.kind == UnitKind::Neuron) return QStringLiteral("L%1 MLP neurons").arg(b.layer);
  return b.sae_label;
}

void UnitsView::refreshTargets() {
  if (!result_ || !result_->base) return;
  setTargetPairChoices(*target_, *versus_, *result_->run, result_->base->top, result_->base->target);
}

void UnitsView::updateStatus() {
  QStringList parts;
  if (!failure_.isEmpty()) {
    parts << QStringLiteral("<span style=\"color: #b3261e;\">%1</span>").arg(failure_.toHtmlEscaped());
  } else if (!run_) {
    parts << QStringLiteral("Type a prompt to see its units.");
  } else if (kind_ == UnitKind::Latent && sae_id_.isEmpty()) {
    parts << QStringLiteral("No sparse autoencoder loaded.");
  } else if (!result_) {
    parts << QStringLiteral("Computing…");
  } else if (!isCurrent()) {
    const bool other_run = result_->run_job != run_->job && result_->run->run.tokens != run_->run.tokens;
    parts << QStringLiteral("<b>Updating…</b> shown: %1.")
                 .arg(other_run ? QStringLiteral("the previous prompt's units") : QStringLiteral("the previous selection's"));
  } else {
    parts << (attributionPending()
                  ? QStringLiteral("Activations computed in %1; attributions computing… (a backward pass).")
                        .arg(formatDuration(result_->compute_ms))
                  : QStringLiteral("Computed in %1 (one backward pass for the attributions).").arg(formatDuration(result_->compute_ms)));
  }
  if (result_ && result_->ablations_left_out)
    parts << QStringLiteral("Units are read on the run without the ablations (the plain prompt), which gradients explain.");
  status_->setText(parts.join(QLatin1Char(' ')));
}

void UnitsView::refresh() {
  refreshContent();
  updateStatus();  // after the table: whether the attributions are shown is the table's to say
}

void UnitsView::refreshContent() {
  if (kind_ == UnitKind::Latent && LoadedSaes::instance().empty()) {
    // A model folder that carries its own (the built-in model's saes/) offers them in one click.
    const QStringList shipped = run_ ? folderExtras(*run_->run.model).saes : QStringList();
    const QString offer =
        shipped.isEmpty()
            ? QString()
            : QStringLiteral(" This model comes with %1 of its own (<tt>saes/</tt>): <a href=\"load-shipped\">load %2</a>.")
                  .arg(shipped.size() == 1 ? QStringLiteral("one") : QString::number(shipped.size()),
                       shipped.size() == 1 ? QStringLiteral("it") : QStringLiteral("them"));
    message_->setText(QStringLiteral("<b>No sparse autoencoder is loaded.</b> File &gt; Open Sparse Autoencoder… loads "
                                     "one (a SAELens folder: cfg.json and sae_weights.safetensors, or a circuit-tracer "
                                     "transcoder set), or start with <tt>headscope --sae DIR</tt>.") +
                      offer);
  } else if (result_ && !result_->base) {
    message_->setText(QStringLiteral("<span style=\"color: #b3261e;\">%1</span>").arg(result_->message.toHtmlEscaped()));
  } else {
    message_->clear();
  }
  message_->setVisible(!message_->text().isEmpty());
  const bool have = result_ && result_->base &&
                    !(kind_ == UnitKind::Latent && LoadedSaes::instance().empty());
  if (!have) {
    title_->setText(kind_ == UnitKind::Neuron ? QStringLiteral("<b>Neurons</b>") : QStringLiteral("<b>Features</b>"));
    table_caption_->clear();
    table_->setRowCount(0);
    shown_attribution_.reset();
    strip_caption_->clear();
    strip_->setTokens({}, {}, -1);
    strip_->setMessage(QString());
    effects_caption_->clear();
    top_tokens_->setRowCount(0);
    bottom_tokens_->setRowCount(0);
    return;
  }
  const UnitsBase& b = *result_->base;
  const RunResult& run = *result_->run;
  const int pos = b.target.pos;
  {
    QSignalBlocker block(unit_box_);
    unit_box_->setRange(-1, std::max(0, b.n_units() - 1));
    unit_box_->setValue(unit_);
  }
  if (kind_ == UnitKind::Neuron) {
    QSignalBlocker block(source_);
    source_->setCurrentIndex(source_->findData(b.layer));
  }
  const QString at = tokenAt(run.labels.value(pos), pos);
  title_->setText(QStringLiteral("<b>%1</b> at %2 · %3 units").arg(sourceTitle().toHtmlEscaped(), at.toHtmlEscaped()).arg(b.n_units()));
  refreshTable();
  refreshUnit();
}

void UnitsView::refreshTable() {
  if (!result_ || !result_->base) return;
  const UnitsBase& b = *result_->base;
  const RunResult& run = *result_->run;
  const bool by_attr = sortByAttribution();
  // Latents: the attributions arrive after the activations (the second stage); until then their
  // column and the |attribution| list say so. They belong to this base (its run, position, target
  // and SAE), never to another's.
  const std::shared_ptr<const UnitsAttribution> attr = b.attribution();
  shown_attribution_ = attr;
  static const std::vector<int> kNone;
  const std::vector<int>& units = by_attr ? (attr ? attr->by_attribution : kNone) : b.by_activation;
  const int pos = b.target.pos;
  const QString metric = b.target.versus ? QStringLiteral("logit(%1) − logit(%2)").arg(tokenText(run, b.target.target),
                                                                                       tokenText(run, *b.target.versus))
                                         : QStringLiteral("logit(%1)").arg(tokenText(run, b.target.target));
  table_caption_->setText(
      QStringLiteral("The %1 %2 with the largest %3 at %4. Attribution: activation × ∂M/∂activation, M = %5 at that "
                     "position.%6")
          .arg(units.size())
          .arg(kind_ == UnitKind::Neuron ? QStringLiteral("neurons") : QStringLiteral("latents"),
               by_attr ? QStringLiteral("|attribution|") : QStringLiteral("activation"),
               tokenAt(run.labels.value(pos), pos), metric,
               !attr ? QStringLiteral(" Attributions: computing… (a backward pass)")
               : attr->note.isEmpty() ? QString()
                                      : QLatin1Char(' ') + attr->note));
  table_->setRowCount(static_cast<int>(units.size()));
  int selected_row = -1;
  for (size_t i = 0; i < units.size(); ++i) {
    const int u = units[i];
    const int row = static_cast<int>(i);
    auto* name = new QTableWidgetItem(QString::number(u));
    name->setData(Qt::UserRole, u);
    name->setToolTip(unitName(u));
    table_->setItem(row, 0, name);
    table_->setItem(row, 1, numberItem(b.acts(pos, u), false));
    if (attr) {
      table_->setItem(row, 2, numberItem(attr->attribution(u), true));
    } else {
      auto* pending = new QTableWidgetItem(QStringLiteral("computing…"));
      pending->setForeground(palette().color(QPalette::PlaceholderText));
      table_->setItem(row, 2, pending);
    }
    if (u == result_->unit) selected_row = row;
  }
  QSignalBlocker block(table_);
  if (selected_row >= 0) table_->selectRow(selected_row);
  else table_->clearSelection();
}

void UnitsView::refreshUnit() {
  if (!result_ || !result_->base) return;
  const UnitsBase& b = *result_->base;
  const RunResult& run = *result_->run;
  // The unit asked for now (the strip follows a click at once), else the result's.
  const int unit = unit_ >= 0 && unit_ < b.n_units() ? unit_ : result_->unit;
  updateDashboard(unit);
  if (unit < 0) {
    strip_->setTokens({}, {}, -1);
    strip_->setMessage(QStringLiteral("No unit to show."));
    strip_caption_->clear();
    effects_caption_->clear();
    top_tokens_->setRowCount(0);
    bottom_tokens_->setRowCount(0);
    return;
  }
  std::vector<float> values(static_cast<size_t>(b.acts.rows()));
  for (Eigen::Index p = 0; p < b.acts.rows(); ++p) values[static_cast<size_t>(p)] = b.acts(p, unit);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  QStringList labels;
  for (Eigen::Index p = 0; p < b.acts.rows(); ++p) labels << run.labels.value(static_cast<int>(p));
  strip_->setTokens(labels, values, selection_->position());
  const QString name = unitName(unit);
  strip_caption_->setText(QStringLiteral("<b>%1</b> over the prompt (max %2, min %3): blue is positive, red "
                                         "negative, white 0, on one scale for both signs (CircuitsVis's "
                                         "text_neuron_activations colours). Click a token to select it.")
                              .arg(name.toHtmlEscaped(), formatNumber(values.empty() ? 0.0 : *hi),
                                   formatNumber(values.empty() ? 0.0 : *lo)));
  strip_caption_->setTextFormat(Qt::RichText);
  strip_->setFigureText({QStringLiteral("%1: activation over the prompt").arg(name), runSubtitle(run)},
                        kind_ == UnitKind::Neuron ? QStringLiteral("neuron_L%1N%2_activations").arg(b.layer).arg(unit)
                                                  : QStringLiteral("feature_%1_activations").arg(unit));

  const bool effects_of_unit = result_->unit == unit;
  QString caption = kind_ == UnitKind::Neuron
                        ? QStringLiteral("<b>Logit effects</b> of %1: its output weights W_out[%2] times W_U, with no "
                                         "final norm (as Neuronpedia's top and bottom logits).")
                              .arg(name.toHtmlEscaped())
                              .arg(unit)
                        : QStringLiteral("<b>Logit effects</b> of %1: its decoder row W_dec[%2]%3 times W_U, with no "
                                         "final norm (as Neuronpedia's top and bottom logits).")
                              .arg(name.toHtmlEscaped())
                              .arg(unit)
                              .arg(b.sae && b.sae->hook_out.find("hook_z") != std::string::npos
                                       ? QStringLiteral(" through W_O")
                                   : b.sae && b.sae->hook_out.find("mlp.hook_post") != std::string::npos
                                       ? QStringLiteral(" through W_out")
                                       : QString());
  if (b.post_norm)
    caption += kind_ == UnitKind::Neuron
                   ? QStringLiteral(" On this model the MLP's output passes a norm (ln2_post) before it joins the "
                                    "residual stream; these are the weights before that norm, which rescales them.")
                   : QStringLiteral(" On this model that output passes a norm before it joins the residual stream; "
                                    "these are the effects before that norm, which rescales them.");
  if (!effects_of_unit) caption += QStringLiteral(" <i>Computing…</i>");
  else if (!result_->effects_error.isEmpty())
    caption += QStringLiteral(" <span style=\"color: #b3261e;\">%1</span>").arg(result_->effects_error.toHtmlEscaped());
  effects_caption_->setTextFormat(Qt::RichText);
  effects_caption_->setText(caption);
  auto fill = [&](QTableWidget* table, const std::vector<hs::TokenEffect>& effects) {
    table->setRowCount(effects_of_unit ? static_cast<int>(effects.size()) : 0);
    if (!effects_of_unit) return;
    for (size_t i = 0; i < effects.size(); ++i) {
      auto* token = new QTableWidgetItem(tokenText(run, effects[i].token));
      token->setToolTip(QStringLiteral("token id %1").arg(effects[i].token));
      table->setItem(static_cast<int>(i), 0, token);
      table->setItem(static_cast<int>(i), 1, numberItem(effects[i].value, true));
    }
  };
  fill(top_tokens_, result_->effects.top);
  fill(bottom_tokens_, result_->effects.bottom);
  dashboard_box_->setTitle(QStringLiteral("Dashboard of %1").arg(name));
}

const UnitsView::FolderExtras& UnitsView::folderExtras(const hs::Model& model) {
  if (folder_extras_.dir.empty() || folder_extras_.dir != model.dir().string()) {
    const QString dir = QString::fromStdString(model.dir().string());
    folder_extras_.dir = model.dir().string();
    folder_extras_.saes = shippedSaeFolders(dir);
    folder_extras_.heldout = QFileInfo(QDir(dir).filePath(QString::fromLatin1(LoadedDashboards::kHeldOutPassages))).isFile();
  }
  return folder_extras_;
}

void UnitsView::updateDashboard(int unit) {
  auto showMessage = [this](const QString& text) {
    dashboard_->setText(text);
    dashboard_->show();
    dashboard_scroll_->hide();
    right_layout_->setStretchFactor(dashboard_box_, 1);
    dashboard_shown_ = {QString(), -1};
  };
  dashboard_units_.clear();
  dashboard_unit_ = unit;
  if (!result_ || !result_->base || unit < 0) {
    dashboard_wanted_ = {QString(), -1};
    showMessage(kNoDashboards);
    return;
  }
  const UnitsBase& b = *result_->base;
  hs::DashboardUnitsQuery q;
  q.width = b.n_units();
  // The source as `scan --units` names it, for building its dashboards: every layer's neurons at
  // once (one pass gives them all), or the SAE's folder.
  QString units;
  if (b.kind == UnitKind::Neuron) {
    q.kind = "mlp";
    q.layer = b.layer;
    units = QStringLiteral("mlp");
  } else if (b.sae) {
    q.kind = "sae";
    q.layer = b.sae->layer;
    q.hook_in = b.sae->hook_in;
    q.hook_out = b.sae->hook_out;
    q.architecture = b.sae->architecture;
    // `scan --units sae:DIR` names the SAE by its folder's name (unit_dataset.cpp).
    if (const std::optional<LoadedSae> e = LoadedSaes::instance().entry(b.sae_id)) {
      q.sae_name = QFileInfo(QDir::cleanPath(QDir(e->folder).absolutePath())).fileName().toStdString();
      units = QStringLiteral("sae:") + e->folder;
    }
  }
  // None opened for these units: the model folder's held-out passages (the built-in model's) can
  // make them here, with progress; otherwise a scan of the person's own data set does.
  auto noDashboard = [&](const QString& why) {
    dashboard_wanted_ = {QString(), -1};
    const LoadedDashboards& loaded = LoadedDashboards::instance();
    if (units.isEmpty() || !folderExtras(result_->run->model()).heldout) {
      showMessage(why.isEmpty() ? kNoDashboards : why);
      return;
    }
    dashboard_units_ = units;
    if (loaded.building() == units) {
      showMessage(QStringLiteral("Building the dashboards of %1 from this model's held-out passages (%2): %3 of %4 "
                                 "done. Cancel Scan in the status bar stops it.")
                      .arg(b.kind == UnitKind::Neuron ? QStringLiteral("every layer's neurons") : QStringLiteral("these latents"),
                           QString::fromLatin1(LoadedDashboards::kHeldOutPassages))
                      .arg(loaded.buildDone())
                      .arg(loaded.buildTotal()));
      return;
    }
    showMessage((why.isEmpty() ? QString() : why + QStringLiteral("<br>")) +
                QStringLiteral("This model carries held-out text for them (<tt>%1</tt>): <a href=\"build\">build %2 "
                               "dashboards</a> from it (a scan with progress in the status bar; kept for later "
                               "sessions), or scan your own with File &gt; Scan Data Set.")
                    .arg(QString::fromLatin1(LoadedDashboards::kHeldOutPassages),
                         b.kind == UnitKind::Neuron ? QStringLiteral("every layer's neuron") : QStringLiteral("these latents'")));
  };
  const std::vector<std::shared_ptr<const hs::UnitDashboardIndex>> folders = LoadedDashboards::instance().list();
  if (folders.empty()) {
    noDashboard(QString());
    return;
  }
  const std::string fingerprint = result_->run->model().fingerprint();
  std::shared_ptr<const hs::UnitDashboardIndex> index;
  qint64 number = -1;
  for (auto it = folders.rbegin(); it != folders.rend() && number < 0; ++it) {  // the newest first
    number = hs::dashboard_unit(**it, fingerprint, q, unit);
    if (number >= 0) index = *it;
  }
  if (!index) {
    noDashboard(QStringLiteral("None of the %1 opened dashboard folders is of these units: each is of another model, "
                               "layer or SAE (File &gt; Open Unit Dashboards…).")
                    .arg(folders.size()));
    return;
  }
  const std::pair<QString, qint64> wanted{QString::fromStdString(index->folder.string()), number};
  if (wanted == dashboard_wanted_) return;  // shown already, or on its way
  dashboard_wanted_ = wanted;
  dashboard_->setText(QStringLiteral("Reading the dashboard…"));
  // A file read (of any size a folder from elsewhere may hold) is not done on the GUI thread.
  QFuture<std::pair<std::optional<hs::UnitDashboard>, QString>> read = QtConcurrent::run([index, number] {
    try {
      return std::pair<std::optional<hs::UnitDashboard>, QString>{hs::read_unit_dashboard(*index, number), QString()};
    } catch (const std::exception& e) {
      return std::pair<std::optional<hs::UnitDashboard>, QString>{std::nullopt, QString::fromUtf8(e.what())};
    }
  });
  std::erase_if(in_flight_, [](const QFuture<void>& f) { return f.isFinished(); });
  in_flight_.push_back(QFuture<void>(read));
  deliverLater(read, this, [this, wanted, showMessage](std::pair<std::optional<hs::UnitDashboard>, QString> got) {
    if (wanted != dashboard_wanted_) return;  // another unit was chosen meanwhile
    if (!got.first) {
      showMessage(QStringLiteral("The dashboard could not be read: %1").arg(got.second));
      dashboard_wanted_ = {QString(), -1};
      return;
    }
    dashboard_widget_->setDashboard(*got.first);
    dashboard_->hide();
    dashboard_scroll_->show();
    right_layout_->setStretchFactor(dashboard_box_, 4);
    dashboard_shown_ = wanted;
  });
}

QString UnitsView::tableCsv() const {
  QString csv = QStringLiteral("%1,activation,attribution\n")
                    .arg(kind_ == UnitKind::Neuron ? QStringLiteral("neuron") : QStringLiteral("latent"));
  if (!result_ || !result_->base) return csv;
  const UnitsBase& b = *result_->base;
  const std::shared_ptr<const UnitsAttribution> attr = b.attribution();  // null: still computing
  static const std::vector<int> kNone;
  const std::vector<int>& units = sortByAttribution() ? (attr ? attr->by_attribution : kNone) : b.by_activation;
  for (int u : units)
    csv += QStringLiteral("%1,%2,%3\n")
               .arg(u)
               .arg(static_cast<double>(b.acts(b.target.pos, u)), 0, 'g', 9)
               .arg(attr ? QString::number(static_cast<double>(attr->attribution(u)), 'g', 9) : QString());
  return csv;
}

void UnitsView::saveTableCsv() {
  const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save Table as CSV"),
                                                    figureFileStem() + QStringLiteral(".csv"),
                                                    QStringLiteral("CSV files (*.csv)"));
  if (path.isEmpty()) return;
  auto written = QtConcurrent::run([path, bytes = tableCsv().toUtf8()] { return writeFileAtomically(path, bytes); });
  std::erase_if(in_flight_, [](const QFuture<void>& f) { return f.isFinished(); });
  in_flight_.push_back(QFuture<void>(written));
  deliverLater(written, this, [this](const QString& error) {
    if (!error.isEmpty()) QMessageBox::warning(this, QStringLiteral("Could not save the table"), error);
  });
}

std::vector<ExportFigure> UnitsView::exportFigures(const RunResult& run) {
  if (!exportSkipReason(run).isEmpty()) return {};
  const ViewDescriptor d = kind_ == UnitKind::Neuron ? neuronsDescriptor() : featuresDescriptor();
  const AnalysisKey key = analysisKey(keyFromSelection(*selection_, d.analysis.reads));
  std::vector<ExportFigure> figures;
  figures.push_back({key, [this]() -> ExportFigure::Target {
                       // A figure shows the attributions: the second stage, here at once.
                       if (attributionPending()) {
                         computeAttribution(*result_->base);
                         hs::release_thread_team();
                         refresh();
                       }
                       if (refresher_->pending()) refresh();
                       return {this, size()};
                     }});
  figures.push_back({key, [this]() -> ExportFigure::Target {
                       if (refresher_->pending()) refresh();
                       return {strip_, QSize(900, std::max(60, strip_->heightForWidth(900)))};
                     }});
  return figures;
}

QString UnitsView::exportSkipReason(const RunResult&) const {
  if (kind_ == UnitKind::Latent && LoadedSaes::instance().empty())
    return QStringLiteral("Features: no sparse autoencoder loaded (File > Open Sparse Autoencoder, or --sae DIR)");
  return {};
}

FigureText UnitsView::figureText() const {
  if (!result_ || !result_->base) return {kind_ == UnitKind::Neuron ? QStringLiteral("Neurons") : QStringLiteral("Features"), {}};
  const UnitsBase& b = *result_->base;
  const RunResult& run = *result_->run;
  return {QStringLiteral("%1 at %2; %3").arg(sourceTitle(), tokenAt(run.labels.value(b.target.pos), b.target.pos),
                                             unitName(result_->unit)),
          runSubtitle(run)};
}

QString UnitsView::figureFileStem() const {
  if (!result_ || !result_->base) return kind_ == UnitKind::Neuron ? QStringLiteral("neurons") : QStringLiteral("features");
  const UnitsBase& b = *result_->base;
  if (kind_ == UnitKind::Neuron) return QStringLiteral("neurons_L%1_pos%2").arg(b.layer).arg(b.target.pos);
  return QStringLiteral("features_pos%1").arg(b.target.pos);
}

}  // namespace hs::ui
