// Immutable, view-ready results that the AnalysisController hands to the views. Each is made on a
// worker thread, then shared read-only (std::shared_ptr<const ...>) with the GUI thread.
#pragma once

#include <QImage>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/analysis/analysis.h"
#include "core/session/session.h"

namespace hs::ui {

// One forward pass over the prompt, plus what every view needs regardless of the selection.
struct RunResult {
  quint64 job = 0;
  hs::TextRun run;                       // model, cache, tokens, labels, timings, warnings
  QStringList labels;                    // [pos] display labels (visible whitespace)
  std::vector<hs::Prediction> next;      // top predictions after the last position
  // [layer * n_head + head]: each head's pattern as a small image (max-pooled when long), with
  // masked cells in the masked colour. Painted scaled without smoothing by the head grid.
  std::vector<QImage> thumbnails;
  double worker_ms = 0.0;                // tokenize + forward + thumbnails, on the worker
  double latency_ms = 0.0;               // request -> result on the GUI thread (set on arrival)

  int n_pos() const { return static_cast<int>(run.tokens.size()); }
  int n_layer() const { return run.cache->n_layer(); }
  int n_head() const { return run.cache->config().n_heads; }
  const hs::Model& model() const { return *run.model; }
};

// The analyses at one destination position: the residual decomposition, the heads' write norms
// and direct logit attribution to a target token.
struct PositionResult {
  quint64 run_job = 0;
  std::shared_ptr<const RunResult> run;
  int pos = 0;
  bool target_is_prediction = true;      // the target follows the predicted next token
  int32_t target = 0;
  hs::RowMatrixXf write_norms;           // [layer, head]
  hs::ResidualDecomposition parts;
  hs::LogitAttribution dla;
  std::vector<hs::Prediction> top;       // predictions after `pos`, most likely first
};

// Concatenate-then-project beside project-then-sum, for one layer.
struct LayerResult {
  quint64 run_job = 0;
  std::shared_ptr<const RunResult> run;
  int layer = 0;
  hs::ConcatVsSum cs;
  // Colour ranges (symmetric, +-range). attn_out via both paths shares one: max |attn_out|, so
  // the two are drawn on one scale. The heads' r_h share another, the 99.5th percentile of |r_h|
  // over every head (larger values saturate): attn_out adds b_O and every head, and is several
  // times larger than a typical head's values (2-8x at the 99th percentile in the built-in
  // model), so on attn_out's scale the r_h images were nearly white.
  float output_range = 1.0f;
  float head_range = 1.0f;
  std::vector<QImage> head_result_images;  // [head], on head_range
};

}  // namespace hs::ui

