#include "ui/views/patching_view.h"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>

#include <chrono>

#include "core/analysis/patching_checks.h"
#include "core/model/model.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"

namespace hs::ui {
namespace {

QString siteTitle(hs::HookPoint site) {
  switch (site) {
    case hs::HookPoint::ResidPre: return QStringLiteral("resid_pre: the residual stream entering the layer, one position");
    case hs::HookPoint::AttnOut: return QStringLiteral("attn_out: the attention block's output, one position");
    case hs::HookPoint::MlpOut: return QStringLiteral("mlp_out: the MLP block's output, one position");
    case hs::HookPoint::Z: return QStringLiteral("z: one head's output, every position");
  }
  return {};
}

QString siteName(hs::HookPoint site) { return QString::fromLatin1(hs::hook_short_name(site).data()); }

}  // namespace

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
  };
  d.analysis.id = d.id;
  d.analysis.with_every_run = false;  // seconds on GPT-2 small: only when asked
  d.analysis.on_demand = true;
  d.analysis.compute_long = [](const RunResult& run, const AnalysisKey& key, const AnalysisJob& job) {
    if (key.params.size() != 3) throw hs::Error("patching needs a corrupted prompt, an answer and a wrong answer.");
    const auto t0 = std::chrono::steady_clock::now();
    auto r = std::make_shared<PatchingViewResult>();
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
    for (size_t i = 0; i < kSites.size(); ++i) {
      hs::SweepControl control;  // threads: every core (the window stays on its own thread)
      const QString name = siteName(kSites[i]);
      control.progress = [&job, i, name](double f) { job.progress((static_cast<double>(i) + f) / kSites.size(), name); };
      control.cancelled = job.cancelled;
      r->sweeps[i] = hs::patching_sweep(*clean, *corrupt, r->inputs.answer, r->inputs.wrong, kSites[i], control);
    }
    r->warnings = hs::patching_warnings(*clean, r->sweeps[0].metric_clean, r->sweeps[0].metric_corrupt);
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
      "other way."));
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
  message_ = new QLabel(this);
  message_->setObjectName(QStringLiteral("patchMessage"));
  message_->setWordWrap(true);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(message_);

  auto* grid = new QGridLayout;
  grid->setSpacing(8);
  for (size_t i = 0; i < kSites.size(); ++i) {
    const hs::HookPoint site = kSites[i];
    auto* map = new HeatmapView(this);
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
      connect(map, &HeatmapView::cellContextMenu, this,
              [this](int layer, int head, QMenu* menu) { Q_EMIT headContextMenu(layer, head, menu); });
    connect(map, &HeatmapView::cellClicked, this, [this, site](int layer, int col) {
      if (site == hs::HookPoint::Z) selection_->setHead(layer, col);
      else {
        selection_->setLayer(layer);
        selection_->setPosition(col);
      }
    });
    map->setTooltipFormatter([this, i, site](int layer, int col, float v) -> QString {
      if (!result_) return {};
      const hs::PatchingResult& s = result_->sweeps[i];
      const QString where = site == hs::HookPoint::Z ? headLabel(layer, col)
                                                     : QStringLiteral("L%1 at %2").arg(layer).arg(
                                                           tokenAt(result_->run->labels.value(col), col));
      return QStringLiteral("%1 %2: normalized effect %3 (m = %4; clean %5, corrupted %6)")
          .arg(siteName(site), where, formatNumber(v), formatNumber(s.raw(layer, col)), formatNumber(s.metric_clean),
               formatNumber(s.metric_corrupt));
    });
  }
  layout->addLayout(grid, 1);
  summary_ = new QLabel(this);
  summary_->setObjectName(QStringLiteral("patchSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(summary_);

  for (QLineEdit* edit : {corrupt_, answer_, wrong_}) {
    connect(edit, &QLineEdit::textChanged, this, [this] {
      validate();
      updateSummary();  // the maps are of the inputs they were made with: say so when these differ
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
  if (corrupt_->text().isEmpty() && answer_->text().isEmpty() && wrong_->text().isEmpty()) return {};
  return {{kCorrupt, corrupt_->text()}, {kAnswer, answer_->text()}, {kWrong, wrong_->text()}};
}

void PatchingView::setViewInputs(const ViewInputs& inputs) {
  corrupt_->setText(inputs.value(kCorrupt).toString());
  answer_->setText(inputs.value(kAnswer).toString());
  wrong_->setText(inputs.value(kWrong).toString());
}

AnalysisKey PatchingView::key() const {
  AnalysisKey k;
  k.params = {typedTokenText(corrupt_->text()), typedTokenText(answer_->text()), typedTokenText(wrong_->text())};
  return k;
}

QString PatchingView::messageText() const { return message_->text(); }
QString PatchingView::statusText() const { return status_->text(); }
QString PatchingView::summaryText() const { return summary_->text(); }

HeatmapView* PatchingView::heatmap(hs::HookPoint site) const {
  for (size_t i = 0; i < kSites.size(); ++i)
    if (kSites[i] == site) return maps_[i];
  return nullptr;
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
  // Checking the inputs tokenizes both prompts: done when the tab is shown, not per keystroke
  // behind a hidden tab. The maps stay: they change only with a new result.
  refresher_->request();
}

bool PatchingView::validate() {
  auto show = [this](const QString& text, bool error) {
    message_->setText(text);
    message_->setStyleSheet(error ? QStringLiteral("color: #b3261e;") : QString());
  };
  corrupt_count_->clear();
  bool ok = false;
  if (!run_) {
    show(QStringLiteral("Type a prompt above first: it is the clean run."), false);
  } else if (corrupt_->text().isEmpty()) {
    show(QStringLiteral("Type a corrupted prompt with as many tokens as the clean one (%1), an answer and a wrong "
                        "answer, then Run.")
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
                                              : QStringLiteral(" The sweep runs both prompts without the ablations.")),
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

bool PatchingView::run() {
  if (running_ || !validate()) return false;
  setRunning(true);
  progress_->setValue(0);
  status_->setText(QStringLiteral("Starting…"));
  Q_EMIT analysisRequested(key());
  return true;
}

void PatchingView::cancel() {
  if (!running_) return;
  Q_EMIT cancelRequested();
  setRunning(false);
  status_->setText(QStringLiteral("Cancelled."));
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
  setRunning(false);
  validate();
  status_->setText(QStringLiteral("The sweep failed."));
  message_->setText(message);
  message_->setStyleSheet(QStringLiteral("color: #b3261e;"));
}

void PatchingView::setResult(std::shared_ptr<const ViewResult> result) {
  auto r = std::dynamic_pointer_cast<const PatchingViewResult>(std::move(result));
  if (!r) return;
  result_ = std::move(r);
  setRunning(false);
  validate();
  size_t cells = 0;
  for (const auto& s : result_->sweeps) cells += static_cast<size_t>(s.raw.size());
  status_->setText(QStringLiteral("%1 patched runs in %2.").arg(cells).arg(formatDuration(result_->elapsed_ms)));
  maps_dirty_ = true;
  refresher_->request();
}

void PatchingView::refresh() {
  if (!running_) validate();
  if (maps_dirty_) drawMaps();
  updateSummary();
}

void PatchingView::drawMaps() {
  maps_dirty_ = false;
  if (!result_) {
    for (HeatmapView* m : maps_) m->clear();
    return;
  }
  const RunResult& run = *result_->run;
  QStringList layers, heads;
  for (int l = 0; l < run.n_layer(); ++l) layers << QStringLiteral("L%1").arg(l);
  for (int h = 0; h < run.n_head(); ++h) heads << QStringLiteral("H%1").arg(h);
  const QString subtitle = QStringLiteral("%1 · clean %2 → corrupted %3 · m = logit(%4) − logit(%5)")
                               .arg(QString::fromStdString(run.model().name()), quotedPrompt(QString::fromStdString(run.run.text), 40),
                                    quotedPrompt(result_->corrupt_text, 40), tokenText(run, result_->inputs.answer),
                                    tokenText(run, result_->inputs.wrong));
  for (size_t i = 0; i < kSites.size(); ++i) {
    const hs::PatchingResult& s = result_->sweeps[i];
    HeatmapView* map = maps_[i];
    map->setMatrix(static_cast<int>(s.normalized.rows()), static_cast<int>(s.normalized.cols()),
                   std::vector<float>(s.normalized.data(), s.normalized.data() + s.normalized.size()));
    map->setRowLabels(layers);
    if (kSites[i] == hs::HookPoint::Z) {
      map->setColumnLabels(heads);
      map->setColumnLabelsRotated(false);
    } else {
      // Position labels: the clean token, and the corrupted one where they differ.
      QStringList cols;
      for (int p = 0; p < static_cast<int>(s.normalized.cols()); ++p) {
        const QString clean = run.labels.value(p), corrupt = result_->corrupt_labels.value(p);
        cols << (clean == corrupt ? clean : clean + QStringLiteral("/") + corrupt);
      }
      map->setColumnLabels(cols);
    }
    map->setFigureText({QStringLiteral("Activation patching: %1 (normalized effect)").arg(siteName(kSites[i])), subtitle},
                       QStringLiteral("patching_%1").arg(siteName(kSites[i])));
  }
}

void PatchingView::updateSummary() {
  if (!result_) {
    summary_->clear();
    return;
  }
  const RunResult& run = *result_->run;
  const hs::PatchingResult& first = result_->sweeps[0];
  // Patching runs plain prompts: new ablations leave the maps as they are; another model, prompt
  // or input does not, and the note says which changed.
  QStringList changed;
  if (run_ && run_->model().fingerprint() != run.model().fingerprint())
    changed << QStringLiteral("of %1, not of the model now open").arg(QString::fromStdString(run.model().name()).toHtmlEscaped());
  else if (run_ && run_->run.tokens != result_->inputs.clean)
    changed << QStringLiteral("of an earlier prompt");
  if (corrupt_->text() != result_->corrupt_text || answer_->text() != result_->answer_text ||
      wrong_->text() != result_->wrong_text)
    changed << QStringLiteral("of other inputs than the ones above");
  QString warnings;
  for (const std::string& w : result_->warnings)
    warnings += QStringLiteral("<br><span style=\"color: #b3261e;\">Warning: %1</span>")
                    .arg(QString::fromStdString(w).toHtmlEscaped());
  summary_->setText(QStringLiteral("m_clean = %1, m_corrupt = %2 (logit(%3) − logit(%4)).%5%6%7")
                        .arg(formatNumber(first.metric_clean), formatNumber(first.metric_corrupt),
                             tokenText(run, result_->inputs.answer).toHtmlEscaped(),
                             tokenText(run, result_->inputs.wrong).toHtmlEscaped(),
                             result_->ablations_left_out ? QStringLiteral(" Both prompts ran without the ablations.")
                                                         : QString(),
                             changed.isEmpty() ? QString()
                                               : QStringLiteral(" <b>These maps are %1: Run again.</b>")
                                                     .arg(changed.join(QStringLiteral(" and "))),
                             warnings));
}

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
  // Inputs that fit this run: its four maps, computed for the export. Otherwise nothing: four empty
  // axes under an error are not a figure (exportSkipReason says why).
  std::vector<ExportFigure> figures;
  if (!inputsFit(run)) return figures;
  for (size_t i = 0; i < kSites.size(); ++i)
    figures.push_back({key(), [this, i]() -> ExportFigure::Target {
                         if (maps_dirty_) drawMaps();
                         maps_[i]->replotNow();
                         return {maps_[i], kHeatmapFigureSize};
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
  return {QStringLiteral("Activation patching: %1 → %2")
              .arg(quotedPrompt(QString::fromStdString(run_->run.text), 40), quotedPrompt(corrupt_->text(), 40)),
          runSubtitle(*run_)};
}

}  // namespace hs::ui
