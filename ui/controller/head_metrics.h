// Head metrics: one number per head that the head grid can show as a badge on each thumbnail,
// sort by and filter by (the "Scores:" control of the heads panel). The head detectors of
// core/analysis/head_detectors.h are the first; anything with a value per [layer, head] can be
// one (the OV copying score, a data set's mean scores).
//
// Adding a metric is one line in headMetrics() (head_metrics.cpp): a HeadMetric with an id, a
// name, a definition for the tooltip, a colour range, and how its values are obtained:
//   Run       compute(run) on the run's worker with every run, so the badges are ready with the
//             thumbnails; it must be cheap (a keystroke's whole run takes a few ms).
//   Model     compute(run) once per loaded model (memoized on its weights), for numbers that
//             depend on the weights alone.
//   External  no compute: whoever has the values hands them to the heads panel
//             (HeadMetricsBar::setExternalValues), e.g. a data-set scan when it finishes.
// The window, the panel and the tooltips pick every metric up from the list.
#pragma once

#include <QString>

#include <functional>
#include <vector>

#include "ui/controller/results.h"
#include "ui/style/colormap.h"

namespace hs::ui {

struct HeadMetric {
  enum class Source { Run, Model, External };

  QString id;          // stable: settings, tests ("induction")
  QString name;        // the control's and the tooltip's word for it ("induction")
  QString definition;  // one or two sentences: the control's tooltip and the legend's
  Source source = Source::Run;
  // Worker thread, from an immutable run; returns [layer, head] values (NaN: no score for that
  // head) and a note. May throw hs::Error: the run still lands, with this metric all NaN and the
  // message as its note. `previous`: this metric's values on the run whose cache prefix `run`
  // reused, or null; a metric may continue from what it carried there.
  std::function<HeadMetricValues(const RunResult& run, const HeadMetricValues* previous)> compute;
  float low = 0.0f, high = 1.0f;    // fixed colour range (values outside are drawn at the ends)
  ColorMap colors = ColorMap::Score;  // Score for [low, high] scores; Diverging for signed ones
  int decimals = 2;                 // digits after the point on the badge
};

// Every metric, in the order the control lists them.
const std::vector<HeadMetric>& headMetrics();
// The metric with this id, or null.
const HeadMetric* findHeadMetric(const QString& id);

// The values of every Run metric for `run`, and of every Model metric that was asked for
// (wantModelMetric) or is already known for the run's weights (registry order; External ones are
// not included). Any thread; what AnalysisController::computeRun stores in RunResult::head_metrics.
// `previous`: the run whose cache prefix `run` reused, or null.
std::vector<HeadMetricValues> computeHeadMetrics(const RunResult& run, const RunResult* previous = nullptr);
// From now on, runs carry this Model metric. A Model metric reads the whole vocabulary once per
// model, which would delay the first run of every model opened, so it waits until someone shows
// it (HeadMetricsBar). Any thread.
void wantModelMetric(const QString& id);
bool modelMetricWanted(const QString& id);
// Forgets which Model metrics were asked for and every value remembered, as in a new process: for
// tests, where one process opens many windows and each should start as the application does.
void forgetModelMetrics();

// The badge of a value: its text ("0.95", "—" for no score) and its fill on the metric's map.
QString headMetricText(const HeadMetric& metric, float value);
QColor headMetricColor(const HeadMetric& metric, float value);

}  // namespace hs::ui
