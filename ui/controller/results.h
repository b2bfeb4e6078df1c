// Immutable results that the AnalysisController hands to the views. Each is made on a worker
// thread, then shared read-only (std::shared_ptr<const ...>) with the GUI thread.
//
// The controller knows two kinds: the run (one forward pass and what every view needs from it)
// and a view's own analysis, which derives from ViewResult and is computed by a function the
// view registers (ui/views/registry.cpp). It does not know which views exist.
#pragma once

#include <QImage>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/analysis/ablation.h"
#include <any>

#include "core/analysis/top_k.h"
#include "core/analysis/view_data.h"
#include "core/session/session.h"

namespace hs::ui {

// One per-head number for every head (a head metric's values, ui/controller/head_metrics.h).
struct HeadMetricValues {
  QString id;              // the metric's id ("induction")
  hs::RowMatrixXf values;  // [layer, head]; NaN: no score for that head
  QString note;            // one line on what the values averaged, or why there are none
  // What the metric's compute keeps for the next run that extends this one's prompt (its own
  // type, e.g. a detector's running sums); empty when it keeps nothing.
  std::any carry;
  // Values made elsewhere (an External metric's, e.g. a data-set scan's): the fingerprint of the
  // model they were made with (hs::Model::fingerprint) and its name. They are shown only on runs
  // of that model. Empty for the metrics a run computes itself.
  std::string model;
  QString model_name;
};

// One forward pass over the prompt, plus what every view needs regardless of the selection.
struct RunResult {
  quint64 job = 0;
  hs::TextRun run;                       // model, cache, tokens, labels, timings, warnings
  QStringList labels;                    // [pos] display labels (visible whitespace)
  std::vector<hs::Prediction> next;      // top predictions after the last position
  // [layer * n_head + head]: each head's pattern as a small image (max-pooled when long), with
  // masked cells in the masked colour. Painted scaled without smoothing by the head grid.
  std::vector<QImage> thumbnails;
  // The pooled grids the thumbnails were drawn from: the next run, when it reuses this run's
  // prefix, pools only the rows of cells that can have changed (hs::overview_of_run).
  std::vector<hs::PooledGrid> thumbnail_grids;
  // Every head metric computed with the run (headMetrics() with a per-run or per-model source),
  // in registry order.
  std::vector<HeadMetricValues> head_metrics;
  double worker_ms = 0.0;                // tokenize + forward + thumbnails + head metrics, on the worker
  double latency_ms = 0.0;               // request -> result on the GUI thread (set on arrival)
  // With ablations (AnalysisController::setAblations), run.cache is the ablated run, which every
  // view shows; `baseline` is the plain run of the same tokens and `ablation` the two compared.
  // Both empty for a plain run.
  std::shared_ptr<const hs::ActivationCache> baseline;
  std::optional<hs::RunComparison> ablation;

  int n_pos() const { return static_cast<int>(run.tokens.size()); }
  int n_layer() const { return run.cache->n_layer(); }
  int n_head() const { return run.cache->config().n_heads; }
  const hs::Model& model() const { return *run.model; }
  // The values of head metric `id` computed with this run, or null.
  const HeadMetricValues* headMetric(const QString& id) const {
    for (const HeadMetricValues& m : head_metrics)
      if (m.id == id) return &m;
    return nullptr;
  }
  const hs::Interventions& ablations() const { return run.cache->interventions; }
  // The run without ablations: baseline when there is one, else the run itself.
  const std::shared_ptr<const hs::ActivationCache>& plainCache() const { return baseline ? baseline : run.cache; }
};

// The parts of the selection an analysis reads (bits of AnalysisSpec::reads).
// kReadsVersus: the token a logit difference subtracts from the target (Selection::versus).
enum SelectionPart : unsigned {
  kReadsLayer = 1u,
  kReadsHead = 2u,
  kReadsPosition = 4u,
  kReadsTarget = 8u,
  kReadsVersus = 16u
};

// What a view's analysis is computed for: the parts of the selection it reads. The parts it does
// not read stay unset, so changing them neither asks for nor invalidates a computation.
struct AnalysisKey {
  int layer = -1;
  int head = -1;
  int pos = -1;
  std::optional<int32_t> target;  // empty: the predicted next token
  std::optional<int32_t> versus;  // empty: the target's logit alone, no logit difference
  // The view's own inputs beyond the selection (a second prompt, answer tokens as text), opaque
  // to the controller; part of the key like the rest.
  QStringList params;
  bool operator==(const AnalysisKey&) const = default;
};

// The base of every view's computed result.
struct ViewResult {
  virtual ~ViewResult() = default;
  quint64 run_job = 0;                   // the run it was computed from
  std::shared_ptr<const RunResult> run;
  AnalysisKey key;                       // what it was computed for
  double compute_ms = 0.0;               // how long computing it took (wall clock, on its worker)
};

// Computes a view's analysis on a worker thread (throws hs::Error); the controller fills in
// run_job, run and key.
using AnalysisFn = std::function<std::shared_ptr<ViewResult>(const RunResult& run, const AnalysisKey& key)>;

// What a long analysis may use while it runs on its worker: both may be called from that thread
// as often as it likes. `progress` reaches the GUI thread as AnalysisController::analysisProgress;
// `cancelled` turns true when the request was cancelled or superseded (the analysis then throws
// hs::Cancelled, or returns anything: the result is dropped).
struct AnalysisJob {
  std::function<void(double fraction, const QString& what)> progress = [](double, const QString&) {};
  std::function<bool()> cancelled = [] { return false; };
};
using LongAnalysisFn =
    std::function<std::shared_ptr<ViewResult>(const RunResult& run, const AnalysisKey& key, const AnalysisJob& job)>;

struct AnalysisSpec {
  QString id;             // the view's id ("contributions")
  unsigned reads = 0;     // SelectionPart bits
  AnalysisFn compute;
  // Computed with every run, for the key last asked for (moved to the new run), so that a
  // keystroke's views are ready when the run is: while its view is on screen, or while hidden
  // if it is cheap (AnalysisController::kHiddenAheadMs). Off for analyses too slow to run per
  // key: those are their own job, asked for only while their view is on screen (MainWindow).
  bool with_every_run = true;
  // For long analyses: used instead of `compute` when set (compute then calls it without
  // progress, for Export All), reporting progress and stopping when cancelled.
  LongAnalysisFn compute_long;
  // Computed only when the view asks (AnalysisView::analysisRequested: a Run button), never
  // because the selection or the run changed.
  bool on_demand = false;
};

// The key for a new run, from the key asked for on the previous one: a position on the previous
// last token follows the new last token (typing keeps the end selected), and everything is
// clamped into the new run's bounds. A position the key holds although `reads` lacks it (a view
// that reads it in one mode only, AnalysisView::analysisKey) follows the same way.
AnalysisKey followRun(AnalysisKey key, unsigned reads, bool pos_was_last, const RunResult& run);

}  // namespace hs::ui
