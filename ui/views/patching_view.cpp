#include "ui/views/patching_view.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/analysis/patching_checks.h"
#include "core/model/model.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"
#include "ui/widgets/scatter_view.h"

namespace hs::ui {
namespace {

// Short enough for a map a quarter of the view wide at 1280 x 800; the axes say the rest.
QString siteTitle(hs::HookPoint site) {
  return site == hs::HookPoint::Z ? QStringLiteral("z (per head)") : QString::fromLatin1(hs::hook_short_name(site).data());
}

QString siteName(hs::HookPoint site) { return QString::fromLatin1(hs::hook_short_name(site).data()); }

QString methodName(hs::PatchMethod m) {
  switch (m) {
    case hs::PatchMethod::AtP: return QStringLiteral("AtP estimate");
    case hs::PatchMethod::AtPQK: return QStringLiteral("AtP* estimate (QK fix)");
    case hs::PatchMethod::Exact: return QStringLiteral("exact sweep");
  }
  return {};
}
QString shortMethodTitle(hs::PatchMethod m) {
  return m == hs::PatchMethod::AtP ? QStringLiteral("AtP estimate") : m == hs::PatchMethod::AtPQK ? QStringLiteral("AtP* estimate") : QStringLiteral("exact sweep");
}
QString shortMethodName(hs::PatchMethod m) {
  return m == hs::PatchMethod::AtP ? QStringLiteral("AtP") : m == hs::PatchMethod::AtPQK ? QStringLiteral("AtP*") : QStringLiteral("exact");
}
QString methodId(hs::PatchMethod m) { return QString::fromLatin1(hs::to_string(m).data()); }

size_t siteIndex(hs::AtpSite s) {
  for (size_t i = 0; i < std::size(hs::kAtpSites); ++i)
    if (hs::kAtpSites[i] == s) return i;
  return 0;
}

QTableWidget* newNodeTable(const QStringList& headers, QWidget* parent, const QString& name) {
  auto* t = new QTableWidget(0, static_cast<int>(headers.size()), parent);
  t->setObjectName(name);
  t->setHorizontalHeaderLabels(headers);
  t->verticalHeader()->setVisible(false);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setSelectionMode(QAbstractItemView::SingleSelection);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + 4);
  return t;
}

QTableWidgetItem* numberItem(double v) {
  auto* item = new QTableWidgetItem(formatNumber(v));
  item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return item;
}

}  // namespace

const hs::AtpResult& PatchingViewResult::estimate(hs::PatchMethod method, hs::AtpSite site) const {
  return estimates[method == hs::PatchMethod::AtPQK ? 1 : 0][siteIndex(site)];
}

ViewDescriptor PatchingView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("patching");
  d.title = QStringLiteral("Patching");
  d.menu_text = QStringLiteral("&Patching");
  d.help = QStringLiteral("activation patching from the prompt into a corrupted prompt: resid_pre, attn_out and "
                          "mlp_out per layer and position, each head's z");
  d.export_size = QSize(1500, 1000);
  d.options = {
      {kCorrupt, QStringLiteral("TEXT"), QStringLiteral("the patching view's corrupted prompt, as many tokens as the prompt")},
      {kAnswer, QStringLiteral("TEXT"), QStringLiteral("the patching view's answer token: m = logit(answer) - logit(wrong)")},
      {kWrong, QStringLiteral("TEXT"), QStringLiteral("the patching view's wrong answer token")},
      {kMethod, QStringLiteral("METHOD"),
       QStringLiteral("the patching view's maps: atp (the estimate, the default), atp_qk (AtP* with the QK fix) or "
                      "exact (the sweep)"),
       ViewOption::Type::Text,
       {QStringLiteral("atp"), QStringLiteral("atp_qk"), QStringLiteral("exact")}},
  };
  d.analysis.id = d.id;
  d.analysis.with_every_run = false;  // seconds on GPT-2 small: only when asked
  d.analysis.on_demand = true;
  d.analysis.compute_long = [](const RunResult& run, const AnalysisKey& key, const AnalysisJob& job) {
    // {corrupt, answer, wrong} or {corrupt, answer, wrong, kEstimateOnly | kExactSweep}.
    if (key.params.size() != 3 && key.params.size() != 4)
      throw hs::Error("patching needs a corrupted prompt, an answer and a wrong answer.");
    if (key.params.size() == 4 && key.params[3] != kEstimateOnly && key.params[3] != kExactSweep)
      throw hs::Error("patching is asked for an estimate or the exact sweep, not '" + key.params[3].toStdString() + "'.");
    const bool exact = key.params.size() == 3 || key.params[3] == kExactSweep;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = std::make_shared<PatchingViewResult>();
    r->exact = exact;
    r->corrupt_text = key.params[0];
    r->answer_text = key.params[1];
    r->wrong_text = key.params[2];
    const hs::Model& model = run.model();
    r->inputs = hs::patching_inputs(model, run.run.text, r->corrupt_text.toStdString(), r->answer_text.toStdString(),
                                    r->wrong_text.toStdString(), run.run.bos_prepended);
    // The clean run is the one on screen, without its ablations (patching compares plain runs).
    std::shared_ptr<const hs::ActivationCache> clean = run.plainCache();
    r->ablations_left_out = !run.ablations().empty();
    if (clean->tokens() != r->inputs.clean) clean = model.run(r->inputs.clean);  // a truncated prompt: refused there
    const std::shared_ptr<const hs::ActivationCache> corrupt = model.run(r->inputs.corrupt);
    for (const std::string& label : hs::token_labels(model, r->inputs.corrupt)) r->corrupt_labels << QString::fromStdString(label);
    if (job.cancelled()) throw hs::Cancelled();
    // Every estimate from one backward pass on the corrupted run: the QK fix reads the same
    // gradients as plain AtP (z's: atp_gradient_hooks), so one pass serves both methods.
    const hs::GradientCache grad =
        hs::atp_gradients(*corrupt, r->inputs.answer, r->inputs.wrong, hs::kAtpSites, hs::PatchMethod::AtPQK);
    for (int m = 0; m < 2; ++m)
      for (size_t i = 0; i < std::size(hs::kAtpSites); ++i) {
        if (job.cancelled()) throw hs::Cancelled();
        r->estimates[m][i] = hs::attribution_patching(*clean, *corrupt, grad, hs::kAtpSites[i],
                                                      m == 0 ? hs::PatchMethod::AtP : hs::PatchMethod::AtPQK);
      }
    r->estimate_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const hs::AtpResult& first = r->estimates[0][0];
    if (exact) {
      for (size_t i = 0; i < kSites.size(); ++i) {
        hs::SweepControl control;  // threads: every core (the window stays on its own thread)
        const QString name = siteName(kSites[i]);
        control.progress = [&job, i, name](double f) { job.progress((static_cast<double>(i) + f) / kSites.size(), name); };
        control.cancelled = job.cancelled;
        r->sweeps[i] = hs::patching_sweep(*clean, *corrupt, r->inputs.answer, r->inputs.wrong, kSites[i], control);
      }
      r->warnings = hs::patching_warnings(*clean, r->sweeps[0].metric_clean, r->sweeps[0].metric_corrupt);
    } else {
      r->warnings = hs::patching_warnings(*clean, first.metric_clean, first.metric_corrupt);
    }
    r->elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::shared_ptr<ViewResult>(std::move(r));
  };
  d.analysis.compute = [long_fn = d.analysis.compute_long](const RunResult& run, const AnalysisKey& key) {
    return long_fn(run, key, AnalysisJob{});
  };
  d.create = [](Selection* selection, QWidget* parent) { return new PatchingView(selection, parent); };
  return d;
}

PatchingView::PatchingView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("patchingView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);
  title_ = new QLabel(QStringLiteral("<b>Activation patching</b>"), this);
  title_->setObjectName(QStringLiteral("viewTitle"));
  layout->addWidget(title_);
  caption_ = new QLabel(this);
  caption_->setObjectName(QStringLiteral("sectionCaption"));
  caption_->setWordWrap(true);
  caption_->setText(QStringLiteral(
      "The prompt above is the clean run. Each cell copies one of its activations into a run of the corrupted prompt "
      "and measures m = logit(answer) − logit(wrong) at the last position; colour is the normalized effect "
      "(m − m_corrupt) / (m_clean − m_corrupt): 1 restores the clean answer, 0 changes nothing, below 0 pushes the "
      "other way. The estimates follow your typing; the exact sweep runs when you ask (Run Sweep)."));
  layout->addWidget(caption_);

  auto* form = new QGridLayout;
  form->setHorizontalSpacing(8);
  auto* corrupt_label = new QLabel(QStringLiteral("&Corrupted prompt:"), this);
  corrupt_ = new QLineEdit(this);
  corrupt_->setObjectName(QStringLiteral("corruptEdit"));
  corrupt_->setPlaceholderText(QStringLiteral("the prompt with as many tokens, changed where it matters"));
  corrupt_label->setBuddy(corrupt_);
  corrupt_count_ = new QLabel(this);
  corrupt_count_->setObjectName(QStringLiteral("corruptCount"));
  form->addWidget(corrupt_label, 0, 0);
  form->addWidget(corrupt_, 0, 1, 1, 5);
  form->addWidget(corrupt_count_, 0, 6);
  auto* answer_label = new QLabel(QStringLiteral("&Answer:"), this);
  answer_ = new QLineEdit(this);
  answer_->setObjectName(QStringLiteral("answerEdit"));
  answer_->setPlaceholderText(QStringLiteral("one token, e.g. ␣Paris"));
  answer_->setToolTip(QStringLiteral("The token the clean prompt should predict: exactly one token. A leading space "
                                     "counts (type it, or ␣)."));
  answer_label->setBuddy(answer_);
  auto* wrong_label = new QLabel(QStringLiteral("&Wrong answer:"), this);
  wrong_ = new QLineEdit(this);
  wrong_->setObjectName(QStringLiteral("wrongEdit"));
  wrong_->setPlaceholderText(QStringLiteral("one token, e.g. ␣Rome"));
  wrong_->setToolTip(QStringLiteral("The token the corrupted prompt should predict: exactly one token."));
  wrong_label->setBuddy(wrong_);
  run_button_ = new QPushButton(QStringLiteral("&Run Sweep"), this);
  run_button_->setObjectName(QStringLiteral("patchRun"));
  run_button_->setDefault(true);
  run_button_->setToolTip(QStringLiteral("The exact sweep: one patched run per cell, with the estimates beside it."));
  cancel_button_ = new QPushButton(QStringLiteral("Cancel"), this);
  cancel_button_->setObjectName(QStringLiteral("patchCancel"));
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("patchProgress"));
  progress_->setRange(0, 1000);
  progress_->setTextVisible(true);
  progress_->setFormat(QStringLiteral("%p%"));
  progress_->setFixedWidth(160);
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("patchStatus"));
  form->addWidget(answer_label, 1, 0);
  form->addWidget(answer_, 1, 1);
  form->addWidget(wrong_label, 1, 2);
  form->addWidget(wrong_, 1, 3);
  form->addWidget(run_button_, 1, 4);
  form->addWidget(cancel_button_, 1, 5);
  auto* progress_row = new QHBoxLayout;
  progress_row->addWidget(progress_);
  progress_row->addWidget(status_, 1);
  form->addLayout(progress_row, 1, 6);
  form->setColumnStretch(1, 1);
  form->setColumnStretch(3, 1);
  form->setColumnStretch(6, 2);
  layout->addLayout(form);

  // What the maps show: an estimate (live) or the exact sweep (on demand).
  auto* method_row = new QHBoxLayout;
  method_row->addWidget(new QLabel(QStringLiteral("Maps:"), this));
  methods_ = new QButtonGroup(this);
  const std::pair<hs::PatchMethod, QString> choices[] = {
      {hs::PatchMethod::AtP, QStringLiteral("Estimate (AtP)")},
      {hs::PatchMethod::AtPQK, QStringLiteral("Estimate (AtP*, QK fix)")},
      {hs::PatchMethod::Exact, QStringLiteral("Exact sweep")}};
  for (const auto& [m, text] : choices) {
    auto* b = new QRadioButton(text, this);
    b->setObjectName(QStringLiteral("patchMethod_%1").arg(methodId(m)));
    methods_->addButton(b, static_cast<int>(m));
    method_row->addWidget(b);
  }
  methods_->button(static_cast<int>(hs::PatchMethod::AtP))
      ->setToolTip(QStringLiteral("m_corrupt + (a_clean − a_corrupt) · ∂m/∂a, the gradient taken on the corrupted run: "
                                  "two forward passes and one backward pass for every cell."));
  methods_->button(static_cast<int>(hs::PatchMethod::AtPQK))
      ->setToolTip(QStringLiteral("AtP with the QK fix for z: each head's attention pattern recomputed exactly with the "
                                  "clean queries, then with the clean keys, and only its change taken linearly. The "
                                  "other sites are AtP."));
  methods_->button(static_cast<int>(hs::PatchMethod::Exact))
      ->setToolTip(QStringLiteral("The sweep Run Sweep computes: one patched run per cell."));
  methods_->button(static_cast<int>(method_))->setChecked(true);
  connect(methods_, &QButtonGroup::idClicked, this, [this](int id) { setMethod(static_cast<hs::PatchMethod>(id)); });
  method_row->addSpacing(16);
  z_pos_box_ = new QCheckBox(QStringLiteral("z per head and position"), this);
  z_pos_box_->setObjectName(QStringLiteral("patchZPos"));
  z_pos_box_->setToolTip(QStringLiteral("Estimates only: each head's z patched at one position at a time (z_pos), rows "
                                        "L0H0, L0H1, ...; the exact sweep patches a head at every position at once."));
  connect(z_pos_box_, &QCheckBox::toggled, this, &PatchingView::setZByPosition);
  method_row->addWidget(z_pos_box_);
  method_row->addStretch(1);
  layout->addLayout(method_row);

  message_ = new QLabel(this);
  message_->setObjectName(QStringLiteral("patchMessage"));
  message_->setWordWrap(true);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(message_);
  maps_caption_ = new QLabel(this);
  maps_caption_->setObjectName(QStringLiteral("patchMapsCaption"));
  maps_caption_->setWordWrap(true);
  layout->addWidget(maps_caption_);

  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->setChildrenCollapsible(false);
  auto* maps_box = new QWidget(splitter);
  auto* grid = new QGridLayout(maps_box);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(8);
  for (size_t i = 0; i < kSites.size(); ++i) {
    const hs::HookPoint site = kSites[i];
    auto* map = new HeatmapView(maps_box);
    map->setObjectName(QStringLiteral("patchMap_%1").arg(siteName(site)));
    map->setColorMap(ColorMap::Diverging);
    map->setRangeMode(HeatmapView::RangeMode::Symmetric);
    map->setColorScaleTitle(QStringLiteral("normalized effect"));
    map->setAxisTitles(QStringLiteral("layer"), site == hs::HookPoint::Z ? QStringLiteral("head") : QStringLiteral("position"));
    map->setTitle(siteTitle(site));
    map->setCompact(true);
    maps_[i] = map;
    grid->addWidget(map, static_cast<int>(i / 2), static_cast<int>(i % 2));
    if (site == hs::HookPoint::Z)
      connect(map, &HeatmapView::cellContextMenu, this, [this](int row, int col, QMenu* menu) {
        if (shown_.z_pos) {
          const int n_head = std::max(1, shown_.n_head);
          Q_EMIT headContextMenu(row / n_head, row % n_head, menu);
        } else {
          Q_EMIT headContextMenu(row, col, menu);
        }
      });
    connect(map, &HeatmapView::cellClicked, this, [this, i](int row, int col) {
      if (i == 3 && shown_.z_pos) {
        const int n_head = std::max(1, shown_.n_head);
        pickNode(3, row / n_head, row % n_head);
        selection_->setPosition(col);
      } else {
        pickNode(static_cast<int>(i), row, col);
      }
    });
    map->setTooltipFormatter([this, i, site](int row, int col, float v) -> QString {
      const PatchingViewResult* r = shown_.result.get();
      if (!r) return {};
      const RunResult& run = *r->run;
      const bool z_pos = i == 3 && shown_.z_pos;
      const int n_head = std::max(1, run.n_head());
      const QString where = z_pos ? QStringLiteral("%1 at %2").arg(headLabel(row / n_head, row % n_head),
                                                                  tokenAt(run.labels.value(col), col))
                            : site == hs::HookPoint::Z ? headLabel(row, col)
                                                       : QStringLiteral("L%1 at %2").arg(row).arg(tokenAt(run.labels.value(col), col));
      const bool exact = shown_.method == hs::PatchMethod::Exact;
      const float raw = exact ? r->sweeps[i].raw(row, col)
                              : r->estimate(shown_.method, z_pos ? hs::AtpSite::ZPos : kEstimateSites[i]).raw(row, col);
      const float m_clean = exact ? r->sweeps[i].metric_clean : r->estimates[0][0].metric_clean;
      const float m_corrupt = exact ? r->sweeps[i].metric_corrupt : r->estimates[0][0].metric_corrupt;
      QString text = QStringLiteral("%1 %2 (%3): normalized effect %4 (m = %5; clean %6, corrupted %7)")
                         .arg(z_pos ? QStringLiteral("z_pos") : siteName(site), where, shortMethodName(shown_.method),
                              formatNumber(v), formatNumber(raw), formatNumber(m_clean), formatNumber(m_corrupt));
      if (!exact && r->exact && !z_pos)
        text += QStringLiteral("; exact %1").arg(formatNumber(r->sweeps[i].normalized(row, col)));
      return text;
    });
  }

  // The side pane: the estimate against the exact sweep, and the top neurons.
  auto* side = new QTabWidget(splitter);
  side->setObjectName(QStringLiteral("patchSide"));
  auto* compare_page = new QWidget(side);
  auto* compare = new QVBoxLayout(compare_page);
  compare->setContentsMargins(4, 4, 4, 4);
  auto* site_row = new QHBoxLayout;
  site_row->addWidget(new QLabel(QStringLiteral("Site:"), compare_page));
  compare_combo_ = new QComboBox(compare_page);
  compare_combo_->setObjectName(QStringLiteral("patchCompareSite"));
  for (hs::HookPoint site : kSites) compare_combo_->addItem(siteName(site));
  connect(compare_combo_, qOverload<int>(&QComboBox::currentIndexChanged), this, &PatchingView::setCompareSite);
  site_row->addWidget(compare_combo_, 1);
  compare->addLayout(site_row);
  scatter_ = new ScatterView(compare_page);
  scatter_->setObjectName(QStringLiteral("patchScatter"));
  scatter_->setMinimumHeight(150);
  connect(scatter_, &ScatterView::pointClicked, this, [this](int index) {
    if (!shown_compare_.result || index < 0) return;
    const int cols = static_cast<int>(shown_compare_.result->sweeps[compare_site_].normalized.cols());
    pickNode(compare_site_, index / cols, index % cols);
  });
  scatter_->setTooltipFormatter([this](int index) -> QString {
    if (!shown_compare_.result) return {};
    const int cols = static_cast<int>(shown_compare_.result->sweeps[compare_site_].normalized.cols());
    const ScatterView::Point& p = scatter_->point(index);
    return QStringLiteral("%1: %2 %3, exact %4")
        .arg(nodeLabel(compare_site_, index / cols, index % cols), shortMethodName(shown_compare_.method),
             formatNumber(p.x), formatNumber(p.y));
  });
  compare->addWidget(scatter_, 3);
  auto* note_row = new QHBoxLayout;
  scatter_note_ = new QLabel(compare_page);
  scatter_note_->setObjectName(QStringLiteral("patchScatterNote"));
  scatter_note_->setWordWrap(true);
  note_row->addWidget(scatter_note_, 1);
  scatter_run_ = new QPushButton(QStringLiteral("Run"), compare_page);
  scatter_run_->setObjectName(QStringLiteral("patchScatterRun"));
  scatter_run_->setToolTip(QStringLiteral("Run the exact sweep for these inputs (Run Sweep)."));
  connect(scatter_run_, &QPushButton::clicked, this, [this] { run(); });
  note_row->addWidget(scatter_run_, 0, Qt::AlignTop);
  compare->addLayout(note_row);
  worst_ = newNodeTable({QStringLiteral("node"), QStringLiteral("estimate"), QStringLiteral("exact"),
                         QStringLiteral("|diff.|")},
                        compare_page, QStringLiteral("patchWorst"));
  worst_->setToolTip(QStringLiteral("The nodes where the estimate and the exact sweep disagree most (normalized "
                                    "units). Click one to select it."));
  connect(worst_, &QTableWidget::cellClicked, this, [this](int row, int) {
    if (row >= 0 && row < static_cast<int>(worst_nodes_.size()))
      pickNode(compare_site_, worst_nodes_[static_cast<size_t>(row)].first, worst_nodes_[static_cast<size_t>(row)].second);
  });
  worst_->setMinimumHeight(90);
  compare->addWidget(worst_, 2);
  side->addTab(compare_page, QStringLiteral("Estimate vs exact"));
  auto* neurons_page = new QWidget(side);
  auto* neurons = new QVBoxLayout(neurons_page);
  neurons->setContentsMargins(4, 4, 4, 4);
  neurons_note_ = new QLabel(neurons_page);
  neurons_note_->setObjectName(QStringLiteral("patchNeuronsNote"));
  neurons_note_->setWordWrap(true);
  neurons->addWidget(neurons_note_);
  neurons_ = newNodeTable({QStringLiteral("neuron"), QStringLiteral("normalized"), QStringLiteral("m")}, neurons_page,
                          QStringLiteral("patchNeurons"));
  connect(neurons_, &QTableWidget::cellClicked, this, [this](int row, int) {
    if (QTableWidgetItem* item = neurons_->item(row, 0)) selection_->setLayer(item->data(Qt::UserRole).toInt());
  });
  neurons->addWidget(neurons_, 1);
  side->addTab(neurons_page, QStringLiteral("Top neurons"));
  side->setMinimumWidth(300);
  splitter->addWidget(maps_box);
  splitter->addWidget(side);
  splitter->setStretchFactor(0, 5);
  splitter->setStretchFactor(1, 2);
  layout->addWidget(splitter, 1);
  summary_ = new QLabel(this);
  summary_->setObjectName(QStringLiteral("patchSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(summary_);

  for (QLineEdit* edit : {corrupt_, answer_, wrong_}) {
    connect(edit, &QLineEdit::textChanged, this, [this] {
      validate();
      // The estimate follows the inputs; the maps never show one of other inputs.
      refresher_->request();
    });
    connect(edit, &QLineEdit::returnPressed, this, [this] { run(); });
  }
  connect(run_button_, &QPushButton::clicked, this, [this] { run(); });
  connect(cancel_button_, &QPushButton::clicked, this, &PatchingView::cancel);
  refresher_ = new RefreshWhenShown(this, [this] { refresh(); });
  setRunning(false);
  validate();
  refresh();
}

ViewInputs PatchingView::viewInputs() const {
  if (corrupt_->text().isEmpty() && answer_->text().isEmpty() && wrong_->text().isEmpty() &&
      method_ == hs::PatchMethod::AtP)
    return {};
  return {{kCorrupt, corrupt_->text()}, {kAnswer, answer_->text()}, {kWrong, wrong_->text()}, {kMethod, methodId(method_)}};
}

void PatchingView::setViewInputs(const ViewInputs& inputs) {
  corrupt_->setText(inputs.value(kCorrupt).toString());
  answer_->setText(inputs.value(kAnswer).toString());
  wrong_->setText(inputs.value(kWrong).toString());
  method_note_.clear();
  const QString method = inputs.value(kMethod).toString();
  if (method.isEmpty()) {
    setMethod(hs::PatchMethod::AtP);
  } else if (const auto m = hs::parse_patch_method(method.toStdString())) {
    setMethod(*m);
  } else {
    method_note_ = QStringLiteral("--%1 takes atp, atp_qk or exact, not “%2”: the maps show the AtP estimate.")
                       .arg(kMethod, method.toHtmlEscaped());
    setMethod(hs::PatchMethod::AtP);
  }
  validate();
}

AnalysisKey PatchingView::key() const {
  AnalysisKey k;
  k.params = {typedTokenText(corrupt_->text()), typedTokenText(answer_->text()), typedTokenText(wrong_->text()),
              kExactSweep};
  return k;
}

AnalysisKey PatchingView::estimateKey() const {
  AnalysisKey k = key();
  k.params.back() = kEstimateOnly;
  return k;
}

QString PatchingView::messageText() const { return message_->text(); }
QString PatchingView::statusText() const { return status_->text(); }
QString PatchingView::summaryText() const { return summary_->text(); }
QString PatchingView::mapsCaptionText() const { return maps_caption_->text(); }
QString PatchingView::scatterNote() const { return scatter_note_->text(); }

HeatmapView* PatchingView::heatmap(hs::HookPoint site) const {
  for (size_t i = 0; i < kSites.size(); ++i)
    if (kSites[i] == site) return maps_[i];
  return nullptr;
}

QRadioButton* PatchingView::methodButton(hs::PatchMethod method) const {
  return qobject_cast<QRadioButton*>(methods_->button(static_cast<int>(method)));
}

void PatchingView::setMethod(hs::PatchMethod method) {
  method_ = method;
  if (QAbstractButton* b = methods_->button(static_cast<int>(method)); b && !b->isChecked()) b->setChecked(true);
  z_pos_box_->setEnabled(method != hs::PatchMethod::Exact);
  refresher_->request();
}

void PatchingView::setZByPosition(bool on) {
  z_by_pos_ = on;
  if (z_pos_box_->isChecked() != on) z_pos_box_->setChecked(on);
  refresher_->request();
}

void PatchingView::setCompareSite(int site_index) {
  compare_site_ = std::clamp(site_index, 0, static_cast<int>(kSites.size()) - 1);
  if (compare_combo_->currentIndex() != compare_site_) compare_combo_->setCurrentIndex(compare_site_);
  refresher_->request();
}

bool PatchingView::isCurrent(const PatchingViewResult& r) const {
  if (!run_ || !r.run) return false;
  if (r.run->model().fingerprint() != run_->model().fingerprint() || r.inputs.clean != run_->run.tokens) return false;
  const AnalysisKey now = key();
  for (int i = 0; i < 3; ++i)
    if (r.key.params.value(i) != now.params[i]) return false;
  return true;
}

std::shared_ptr<const PatchingViewResult> PatchingView::currentEstimate() const {
  return estimate_ && isCurrent(*estimate_) ? estimate_ : nullptr;
}

void PatchingView::setRun(std::shared_ptr<const RunResult> run) {
  const bool changed = !run_ || !run || run_->job != run->job;
  run_ = std::move(run);
  if (running_ && changed) {
    // The sweep in flight belongs to the previous run: its result would not be shown. Stop it.
    Q_EMIT cancelRequested();
    setRunning(false);
    status_->setText(QStringLiteral("A new run (the prompt or the ablations changed) stopped the sweep; Run again."));
  }
  // Checking the inputs tokenizes both prompts, and the estimate is a job: done when the tab is
  // shown, not per keystroke behind a hidden tab.
  refresher_->request();
}

bool PatchingView::validate() {
  auto show = [this](const QString& text, bool error) {
    message_->setText(method_note_.isEmpty() ? text : method_note_ + QStringLiteral(" ") + text);
    message_->setStyleSheet(error || !method_note_.isEmpty() ? QStringLiteral("color: #b3261e;") : QString());
  };
  corrupt_count_->clear();
  bool ok = false;
  if (!run_) {
    show(QStringLiteral("Type a prompt above first: it is the clean run."), false);
  } else if (corrupt_->text().isEmpty()) {
    show(QStringLiteral("Type a corrupted prompt with as many tokens as the clean one (%1), an answer and a wrong "
                        "answer: the estimates follow as you type, and Run Sweep computes the exact sweep.")
             .arg(run_->n_pos()),
         false);
  } else {
    const hs::Model& model = run_->model();
    try {
      // Tokenizing three short texts: no model math, cheap enough for each keystroke.
      const auto corrupt_ids = model.encode(typedTokenText(corrupt_->text()).toStdString(), run_->run.bos_prepended);
      corrupt_count_->setText(QStringLiteral("%1 of %2 tokens").arg(corrupt_ids.size()).arg(run_->n_pos()));
      const AnalysisKey k = key();
      const hs::PatchingInputs in =
          hs::patching_inputs(model, run_->run.text, k.params[0].toStdString(), k.params[1].toStdString(),
                              k.params[2].toStdString(), run_->run.bos_prepended);
      show(QStringLiteral("Ready: %1 tokens each; m = logit(%2) − logit(%3) at the last position.%4")
               .arg(in.clean.size())
               .arg(tokenText(*run_, in.answer).toHtmlEscaped(), tokenText(*run_, in.wrong).toHtmlEscaped(),
                    run_->ablations().empty() ? QString()
                                              : QStringLiteral(" Patching runs both prompts without the ablations.")),
           false);
      ok = true;
    } catch (const std::exception& e) {
      QString text = QString::fromStdString(e.what());
      if (!text.isEmpty()) text[0] = text[0].toUpper();
      // An empty field is not a mistake yet: say what is missing, without the error colour.
      show(text, !answer_->text().isEmpty() && !wrong_->text().isEmpty());
    }
  }
  run_button_->setEnabled(ok && !running_);
  return ok;
}

void PatchingView::requestEstimate() {
  if (running_) return;  // the sweep computes the estimates of its inputs too
  if (!validate()) {
    // Nothing to estimate: an estimate still on its way is of inputs no longer shown.
    if (estimate_asked_) {
      Q_EMIT cancelRequested();
      estimate_asked_.reset();
    }
    return;
  }
  if (currentEstimate()) return;
  const std::pair<quint64, AnalysisKey> wanted{run_->job, estimateKey()};
  if (estimate_asked_ == wanted) return;
  estimate_asked_ = wanted;
  estimate_failure_.clear();
  Q_EMIT analysisRequested(wanted.second);
}

bool PatchingView::run() {
  if (running_ || !validate()) return false;
  setRunning(true);
  estimate_asked_.reset();  // the sweep's request supersedes it, and brings the estimates along
  progress_->setValue(0);
  status_->setText(QStringLiteral("Starting…"));
  setMethod(hs::PatchMethod::Exact);
  Q_EMIT analysisRequested(key());
  return true;
}

void PatchingView::cancel() {
  if (!running_) return;
  Q_EMIT cancelRequested();
  setRunning(false);
  status_->setText(QStringLiteral("Cancelled."));
  refresher_->request();  // the estimate, if the sweep's request had superseded it
}

void PatchingView::setRunning(bool running) {
  running_ = running;
  cancel_button_->setEnabled(running);
  progress_->setVisible(running);
  run_button_->setEnabled(!running && run_ != nullptr);
  for (QLineEdit* e : {corrupt_, answer_, wrong_}) e->setReadOnly(running);
}

void PatchingView::showProgress(double fraction, const QString& what) {
  if (!running_) return;
  progress_->setValue(static_cast<int>(fraction * 1000));
  status_->setText(QStringLiteral("Patching %1…").arg(what));
}

void PatchingView::showFailure(const QString& message) {
  if (!running_) {
    // The live estimate failed: said where the maps would be, and not asked for again until the
    // inputs change.
    estimate_failure_ = message;
    refresher_->request();
    return;
  }
  setRunning(false);
  validate();
  status_->setText(QStringLiteral("The sweep failed."));
  message_->setText(message);
  message_->setStyleSheet(QStringLiteral("color: #b3261e;"));
}

void PatchingView::setResult(std::shared_ptr<const ViewResult> result) {
  auto r = std::dynamic_pointer_cast<const PatchingViewResult>(std::move(result));
  if (!r) return;
  estimate_ = r;  // every result carries the estimates of its inputs
  if (r->exact) {
    result_ = r;
    setRunning(false);
    validate();
    size_t cells = 0;
    for (const auto& s : result_->sweeps) cells += static_cast<size_t>(s.raw.size());
    status_->setText(QStringLiteral("%1 patched runs in %2.").arg(cells).arg(formatDuration(result_->elapsed_ms)));
  }
  refresher_->request();
}

void PatchingView::refresh() {
  if (!running_) validate();
  requestEstimate();
  drawMaps();
  drawCompare();
  updateSummary();
}

QString PatchingView::mapsSubtitle(const PatchingViewResult& r) const {
  const RunResult& run = *r.run;
  return QStringLiteral("%1 · clean %2 → corrupted %3 · m = logit(%4) − logit(%5)")
      .arg(QString::fromStdString(run.model().name()), quotedPrompt(QString::fromStdString(run.run.text), 40),
           quotedPrompt(r.corrupt_text, 40), tokenText(run, r.inputs.answer), tokenText(run, r.inputs.wrong));
}

QString PatchingView::nodeLabel(int site_index, int row, int col) const {
  const PatchingViewResult* r = shown_compare_.result ? shown_compare_.result.get() : shown_.result.get();
  if (kSites[static_cast<size_t>(site_index)] == hs::HookPoint::Z) return headLabel(row, col);
  const QString label = r ? r->run->labels.value(col) : QString();
  return QStringLiteral("L%1 at %2").arg(row).arg(tokenAt(label, col));
}

void PatchingView::drawMaps() {
  // The maps show the exact sweep held (with a note when it is of other inputs), or an estimate of
  // the inputs on screen, never an older one.
  Shown want;
  want.method = method_;
  if (method_ == hs::PatchMethod::Exact) want.result = result_;
  else want.result = currentEstimate();
  want.z_pos = z_by_pos_ && method_ != hs::PatchMethod::Exact && want.result;
  want.n_head = want.result ? want.result->run->n_head() : 0;
  want.failure = want.result ? QString() : estimate_failure_;
  want.valid = run_button_->isEnabled() || running_;
  if (want.result) want.stale = staleReasons(*want.result);
  if (want == shown_ && !maps_stale_) return;
  maps_stale_ = false;
  shown_ = want;

  if (method_ == hs::PatchMethod::Exact) {
    maps_caption_->setText(result_ ? QStringLiteral("The exact sweep: one patched run per cell, %1.")
                                         .arg(formatDuration(result_->elapsed_ms))
                                   : QStringLiteral("No exact sweep yet: Run Sweep computes one (seconds on a large "
                                                    "model), with progress and Cancel."));
  } else if (want.result) {
    maps_caption_->setText(
        QStringLiteral("%1 of clean %2 → corrupted %3: m_corrupt + (a_clean − a_corrupt) · ∂m/∂a%4, from two forward "
                       "passes and one backward pass (%5). An estimate: where it fails, see docs/attribution.md.")
            .arg(method_ == hs::PatchMethod::AtP ? QStringLiteral("AtP estimate")
                                                 : QStringLiteral("AtP* estimate (QK fix)"),
                 quotedPrompt(QString::fromStdString(want.result->run->run.text), 40).toHtmlEscaped(),
                 quotedPrompt(want.result->corrupt_text, 40).toHtmlEscaped(),
                 method_ == hs::PatchMethod::AtP
                     ? QString()
                     : QStringLiteral(", each head's pattern recomputed exactly for z"),
                 formatDuration(want.result->estimate_ms)));
  } else if (!want.failure.isEmpty()) {
    maps_caption_->setText(QStringLiteral("<span style=\"color: #b3261e;\">The estimate failed: %1</span>")
                               .arg(want.failure.toHtmlEscaped()));
  } else {
    maps_caption_->setText(want.valid ? QStringLiteral("Estimating…") : QString());
  }

  // Maps of another setting stay for comparison, greyed out and titled so, never as current ones.
  for (HeatmapView* map : maps_) map->setGreyed(!want.stale.isEmpty());
  if (!want.result) {
    for (size_t i = 0; i < kSites.size(); ++i) {
      maps_[i]->clear();
      maps_[i]->setTitle(siteTitle(kSites[i]));
    }
    return;
  }
  const PatchingViewResult& r = *want.result;
  const RunResult& run = *r.run;
  QStringList layers, heads, layer_heads;
  for (int l = 0; l < run.n_layer(); ++l) layers << QStringLiteral("L%1").arg(l);
  for (int h = 0; h < run.n_head(); ++h) heads << QStringLiteral("H%1").arg(h);
  const QString subtitle = mapsSubtitle(r);
  const bool exact = method_ == hs::PatchMethod::Exact;
  for (size_t i = 0; i < kSites.size(); ++i) {
    const bool z_pos = i == 3 && want.z_pos;
    const hs::RowMatrixXf& m = exact ? r.sweeps[i].normalized
                                     : r.estimate(method_, z_pos ? hs::AtpSite::ZPos : kEstimateSites[i]).normalized;
    HeatmapView* map = maps_[i];
    map->setMatrix(static_cast<int>(m.rows()), static_cast<int>(m.cols()),
                   std::vector<float>(m.data(), m.data() + m.size()));
    const QString name = z_pos ? QStringLiteral("z_pos") : siteName(kSites[i]);
    if (z_pos) {
      if (layer_heads.isEmpty())
        for (int l = 0; l < run.n_layer(); ++l)
          for (int h = 0; h < run.n_head(); ++h) layer_heads << headLabel(l, h);
      map->setRowLabels(layer_heads);
      map->setAxisTitles(QStringLiteral("head"), QStringLiteral("position"));
    } else {
      map->setRowLabels(layers);
      if (i == 3) map->setAxisTitles(QStringLiteral("layer"), QStringLiteral("head"));
    }
    if (kSites[i] == hs::HookPoint::Z && !z_pos) {
      map->setColumnLabels(heads);
      map->setColumnLabelsRotated(false);
    } else {
      // Position labels: the clean token, and the corrupted one where they differ.
      QStringList cols;
      for (int p = 0; p < static_cast<int>(m.cols()); ++p) {
        const QString clean = run.labels.value(p), corrupt = r.corrupt_labels.value(p);
        cols << (clean == corrupt ? clean : clean + QStringLiteral("/") + corrupt);
      }
      map->setColumnLabels(cols);
      map->setColumnLabelsRotated(true);
    }
    map->setTitle(QStringLiteral("%1 · %2%3").arg(
        z_pos ? QStringLiteral("z_pos (per head, position)") : siteTitle(kSites[i]), shortMethodTitle(method_),
        want.stale.isEmpty() ? QString() : QStringLiteral(" · stale")));
    const QString file_stem = exact ? QStringLiteral("patching_%1").arg(name)
                                    : QStringLiteral("patching_%1_%2").arg(methodId(method_), name);
    map->setFigureText({exact ? QStringLiteral("Activation patching: %1 (normalized effect)").arg(name)
                              : QStringLiteral("Attribution patching, %1: %2 (normalized effect, an estimate)")
                                    .arg(methodName(method_), name),
                        subtitle},
                       file_stem);
  }
  highlightPicked();
}

void PatchingView::highlightPicked() {
  for (size_t i = 0; i < kSites.size(); ++i) {
    HeatmapView* map = maps_[i];
    if (!picked_ || (*picked_)[0] != static_cast<int>(i)) {
      map->setHighlightedCell(-1, -1);
      map->setHighlightedRow(-1);
      continue;
    }
    const int row = (*picked_)[1], col = (*picked_)[2];
    if (i == 3 && shown_.z_pos) {
      map->setHighlightedCell(-1, -1);
      map->setHighlightedRow(row * std::max(1, shown_.n_head) + col);
    } else {
      map->setHighlightedRow(-1);
      map->setHighlightedCell(row, col);
    }
  }
  int point = -1;
  worst_->clearSelection();
  if (picked_ && (*picked_)[0] == compare_site_ && shown_compare_.result) {
    const int cols = static_cast<int>(shown_compare_.result->sweeps[compare_site_].normalized.cols());
    point = (*picked_)[1] * cols + (*picked_)[2];
    for (size_t k = 0; k < worst_nodes_.size(); ++k)
      if (worst_nodes_[k] == std::pair<int, int>{(*picked_)[1], (*picked_)[2]}) worst_->selectRow(static_cast<int>(k));
  }
  scatter_->setHighlighted(point);
}

void PatchingView::pickNode(int site_index, int row, int col) {
  if (site_index < 0 || site_index >= static_cast<int>(kSites.size())) return;
  picked_ = std::array<int, 3>{site_index, row, col};
  highlightPicked();
  if (kSites[static_cast<size_t>(site_index)] == hs::HookPoint::Z) {
    selection_->setHead(row, col);
  } else {
    selection_->setLayer(row);
    selection_->setPosition(col);
  }
}

void PatchingView::drawCompare() {
  // The scatter pairs the sweep with the estimates computed with it: the same inputs by
  // construction. It is drawn only while those are the inputs on screen.
  Compared want;
  want.result = result_ && result_->exact && isCurrent(*result_) ? result_ : nullptr;
  want.method = estimateMethod();
  want.site = compare_site_;
  want.running = running_;
  want.valid = run_button_->isEnabled();
  // The neurons come from the estimate of the inputs shown (or the sweep's, the same numbers).
  std::shared_ptr<const PatchingViewResult> est = currentEstimate();
  want.neurons = est;
  if (want == shown_compare_) return;
  shown_compare_ = want;

  const hs::AtpSite site = kEstimateSites[static_cast<size_t>(compare_site_)];
  const QString method = shortMethodName(want.method);
  worst_nodes_.clear();
  worst_->setRowCount(0);
  if (!want.result) {
    scatter_->clear(QStringLiteral("No exact sweep\nof these inputs"));  // two lines: the plot is narrow
    scatter_->setFigureText({}, QStringLiteral("patching_scatter"));
    scatter_note_->setText(running_ ? QStringLiteral("The exact sweep is running; the scatter follows.")
                                    : QStringLiteral("Exact has not been run for these inputs: Run computes it."));
    scatter_run_->setVisible(!running_);
    scatter_run_->setEnabled(want.valid);
  } else {
    const PatchingViewResult& r = *want.result;
    const hs::RowMatrixXf& exact = r.sweeps[static_cast<size_t>(compare_site_)].normalized;
    const hs::RowMatrixXf& estimate = r.estimate(want.method, site).normalized;
    std::vector<ScatterView::Point> points;
    std::vector<int> order;
    points.reserve(static_cast<size_t>(exact.size()));
    double sum_abs = 0.0;
    for (int row = 0; row < exact.rows(); ++row)
      for (int col = 0; col < exact.cols(); ++col) {
        points.push_back({estimate(row, col), exact(row, col), row});
        order.push_back(static_cast<int>(order.size()));
        sum_abs += std::fabs(estimate(row, col) - exact(row, col));
      }
    auto diff = [&points](int i) { return std::fabs(points[static_cast<size_t>(i)].x - points[static_cast<size_t>(i)].y); };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return diff(a) > diff(b); });
    const int cols = static_cast<int>(exact.cols());
    const int listed = std::min<int>(kWorstListed, static_cast<int>(order.size()));
    worst_->setRowCount(listed);
    for (int k = 0; k < listed; ++k) {
      const int i = order[static_cast<size_t>(k)];
      worst_nodes_.push_back({i / cols, i % cols});
      worst_->setItem(k, 0, new QTableWidgetItem(nodeLabel(compare_site_, i / cols, i % cols)));
      worst_->setItem(k, 1, numberItem(points[static_cast<size_t>(i)].x));
      worst_->setItem(k, 2, numberItem(points[static_cast<size_t>(i)].y));
      worst_->setItem(k, 3, numberItem(diff(i)));
    }
    const double largest = listed > 0 ? diff(order[0]) : 0.0;
    scatter_->setPoints(std::move(points), r.run->n_layer(), QStringLiteral("layer"));
    scatter_->setAxisTitles(QStringLiteral("%1 estimate (normalized)").arg(method),
                            QStringLiteral("exact sweep (normalized)"));
    const QString name = siteName(kSites[static_cast<size_t>(compare_site_)]);
    scatter_->setFigureText({QStringLiteral("%1 estimate against the exact sweep: %2 (normalized effect)").arg(method, name),
                             mapsSubtitle(r)},
                            QStringLiteral("patching_scatter_%1_%2").arg(methodId(want.method), name));
    scatter_note_->setText(
        QStringLiteral("%1 nodes of %2; the dashed line is estimate = exact. |%3 − exact|: largest %4, mean %5 "
                       "(normalized units).")
            .arg(exact.size())
            .arg(name, method, formatNumber(largest),
                 formatNumber(exact.size() > 0 ? sum_abs / static_cast<double>(exact.size()) : 0.0)));
    scatter_run_->setVisible(false);
  }

  neurons_->setRowCount(0);
  if (!est) {
    neurons_note_->setText(QStringLiteral("The estimate of every MLP neuron (mlp_post, patched at every position) "
                                          "appears here once the inputs are complete."));
  } else {
    const hs::AtpResult& mlp = est->estimate(want.method, hs::AtpSite::MlpPost);
    std::vector<int> order(static_cast<size_t>(mlp.normalized.size()));
    std::iota(order.begin(), order.end(), 0);
    const float* v = mlp.normalized.data();
    const int listed = std::min<int>(kTopNeurons, static_cast<int>(order.size()));
    std::partial_sort(order.begin(), order.begin() + listed, order.end(),
                      [v](int a, int b) { return std::fabs(v[a]) > std::fabs(v[b]); });
    const int d_mlp = static_cast<int>(mlp.normalized.cols());
    neurons_->setRowCount(listed);
    for (int k = 0; k < listed; ++k) {
      const int i = order[static_cast<size_t>(k)];
      auto* item = new QTableWidgetItem(QStringLiteral("L%1 N%2").arg(i / d_mlp).arg(i % d_mlp));
      item->setData(Qt::UserRole, i / d_mlp);
      neurons_->setItem(k, 0, item);
      neurons_->setItem(k, 1, numberItem(v[i]));
      neurons_->setItem(k, 2, numberItem(mlp.raw.data()[i]));
    }
    neurons_note_->setText(QStringLiteral("%1 of each MLP neuron (mlp_post) patched at every position, the largest "
                                          "|normalized| first; the exact sweep does not patch single neurons.")
                               .arg(want.method == hs::PatchMethod::AtP ? QStringLiteral("AtP estimate")
                                                                        : QStringLiteral("Estimate (AtP* is AtP here)")));
  }
  highlightPicked();
}

void PatchingView::updateSummary() {
  const PatchingViewResult* shown = shown_.result.get();
  if (!shown) {
    summary_->clear();
    return;
  }
  const RunResult& run = *shown->run;
  const float m_clean = shown_.method == hs::PatchMethod::Exact ? shown->sweeps[0].metric_clean
                                                                 : shown->estimates[0][0].metric_clean;
  const float m_corrupt = shown_.method == hs::PatchMethod::Exact ? shown->sweeps[0].metric_corrupt
                                                                   : shown->estimates[0][0].metric_corrupt;
  const QStringList& changed = shown_.stale;  // drawMaps, just before, found them
  QString warnings;
  for (const std::string& w : shown->warnings)
    warnings += QStringLiteral("<br><span style=\"color: #b3261e;\">Warning: %1</span>")
                    .arg(QString::fromStdString(w).toHtmlEscaped());
  summary_->setText(QStringLiteral("m_clean = %1, m_corrupt = %2 (logit(%3) − logit(%4)).%5%6%7")
                        .arg(formatNumber(m_clean), formatNumber(m_corrupt),
                             tokenText(run, shown->inputs.answer).toHtmlEscaped(),
                             tokenText(run, shown->inputs.wrong).toHtmlEscaped(),
                             shown->ablations_left_out ? QStringLiteral(" Both prompts ran without the ablations.")
                                                       : QString(),
                             changed.isEmpty() ? QString()
                                               : QStringLiteral(" <b>These maps are %1: Run again.</b>")
                                                     .arg(changed.join(QStringLiteral(" and "))),
                             warnings));
}

QStringList PatchingView::staleReasons(const PatchingViewResult& r) const {
  // Patching runs plain prompts: new ablations leave the maps as they are; another model, prompt
  // or input does not, and the note says which changed (only the sweep is ever shown so: an
  // estimate of other inputs is not shown at all).
  QStringList changed;
  if (run_ && run_->model().fingerprint() != r.run->model().fingerprint())
    changed << QStringLiteral("of %1, not of the model now open").arg(QString::fromStdString(r.run->model().name()).toHtmlEscaped());
  else if (run_ && run_->run.tokens != r.inputs.clean)
    changed << QStringLiteral("of an earlier prompt");
  const AnalysisKey now = key();
  const char* const inputs[] = {"of another corrupted prompt", "of another answer", "of another wrong answer"};
  for (int i = 0; i < 3; ++i)
    if (r.key.params.value(i) != now.params[i]) changed << QString::fromLatin1(inputs[i]);
  return changed;
}

QStringList PatchingView::staleReasons() const { return shown_.stale; }

bool PatchingView::mapsGreyed() const { return maps_[0]->greyed(); }

bool PatchingView::inputsFit(const RunResult& run) const {
  if (corrupt_->text().isEmpty()) return false;
  try {
    const AnalysisKey k = key();
    hs::patching_inputs(run.model(), run.run.text, k.params[0].toStdString(), k.params[1].toStdString(),
                        k.params[2].toStdString(), run.run.bos_prepended);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<ExportFigure> PatchingView::exportFigures(const RunResult& run) {
  // Inputs that fit this run: the exact maps, the chosen estimate's maps and its scatters against
  // the sweep, all from the one computation of the sweep (it brings the estimates of its inputs).
  // Otherwise nothing: empty axes under an error are not a figure (exportSkipReason says why).
  std::vector<ExportFigure> figures;
  if (!inputsFit(run)) return figures;
  const hs::PatchMethod estimate = estimateMethod();
  auto mapFigure = [this](hs::PatchMethod method, size_t i) {
    return ExportFigure{key(), [this, method, i]() -> ExportFigure::Target {
                          method_ = method;  // this instance is Export All's own: it draws each figure in turn
                          drawMaps();
                          maps_[i]->replotNow();
                          return {maps_[i], kHeatmapFigureSize};
                        }};
  };
  for (size_t i = 0; i < kSites.size(); ++i) figures.push_back(mapFigure(hs::PatchMethod::Exact, i));
  for (size_t i = 0; i < kSites.size(); ++i) figures.push_back(mapFigure(estimate, i));
  for (size_t i = 0; i < kSites.size(); ++i)
    figures.push_back({key(), [this, estimate, i]() -> ExportFigure::Target {
                         method_ = estimate;
                         compare_site_ = static_cast<int>(i);
                         drawCompare();
                         scatter_->replotNow();
                         return {scatter_, kScatterFigureSize};
                       }});
  return figures;
}

QString PatchingView::exportSkipReason(const RunResult& run) const {
  if (inputsFit(run)) return {};
  return corrupt_->text().isEmpty()
             ? QStringLiteral("Patching: no corrupted prompt, answer and wrong answer (type them in its tab)")
             : QStringLiteral("Patching: its inputs do not fit this prompt (see its tab)");
}

FigureText PatchingView::figureText() const {
  if (!run_) return {QStringLiteral("Activation patching"), {}};
  return {QStringLiteral("Activation patching (%1): %2 → %3")
              .arg(methodName(method_), quotedPrompt(QString::fromStdString(run_->run.text), 40),
                   quotedPrompt(corrupt_->text(), 40)),
          runSubtitle(*run_)};
}

}  // namespace hs::ui
