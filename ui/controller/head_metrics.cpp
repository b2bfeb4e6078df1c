#include "ui/controller/head_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#include "core/analysis/circuits.h"
#include "core/analysis/head_detectors.h"
#include "core/error.h"

namespace hs::ui {
namespace {

// A detector of core/analysis/head_detectors.h on the run's own prompt.
HeadMetric detectorMetric(hs::HeadDetector detector, const QString& name, const QString& definition) {
  HeadMetric m;
  m.id = QString::fromLatin1(hs::detector_key(detector));
  m.name = name;
  m.definition = definition;
  m.compute = [detector, id = m.id](const RunResult& run, const HeadMetricValues* previous) {
    using Carried = std::shared_ptr<const hs::DetectorScores>;
    const Carried* earlier = previous ? std::any_cast<Carried>(&previous->carry) : nullptr;
    auto s = std::make_shared<const hs::DetectorScores>(
        hs::detect_heads(*run.run.cache, detector, run.run.bos_prepended, earlier ? earlier->get() : nullptr));
    HeadMetricValues v{id, s->scores, {}, Carried(s)};
    if (s->queries > 0)
      v.note = QStringLiteral("mean over %1 query position%2 of this prompt").arg(s->queries).arg(s->queries == 1 ? "" : "s");
    else if (detector == hs::HeadDetector::PreviousToken)
      v.note = QStringLiteral("no score: the prompt needs 3 tokens");
    else if (detector == hs::HeadDetector::DuplicateToken)
      v.note = QStringLiteral("no score: no token occurs twice in this prompt");
    else
      v.note = QStringLiteral("no score: no token occurs twice (other than twice in a row)");
    return v;
  };
  return m;
}

// The copying score of each head's full OV circuit (core/analysis/circuits.h): weights only.
HeadMetric copyingMetric() {
  HeadMetric m;
  m.id = QStringLiteral("copying");
  m.name = QStringLiteral("OV copying");
  m.definition = QStringLiteral("Copying score of the head's full OV circuit E W_OV W_U: sum(λ) / sum(|λ|) over "
                                "its eigenvalues; near 1 for a head that raises the logit of the token it "
                                "attends to. From the weights alone (norm weights folded, biases ignored). E: the "
                                "raw embedding for layer 0's heads, the extended embedding (through layer 0's "
                                "MLP) for later heads.");
  m.source = HeadMetric::Source::Model;
  m.compute = [id = m.id](const RunResult& run, const HeadMetricValues*) {
    return HeadMetricValues{id, hs::copying_scores(*run.model().weights()),
                            QStringLiteral("from the weights: the same for every prompt; heads after layer 0 read "
                                           "the extended embedding"),
                            {}};
  };
  m.low = -1.0f;
  m.high = 1.0f;
  m.colors = ColorMap::Diverging;
  return m;
}

// A detector's mean over a data set (File > Scan Data Set, core/analysis/scan.h): no compute; the
// scan hands its values over. The live badge's colour range, so the two read the same.
HeadMetric datasetMetric(const HeadMetric& live) {
  HeadMetric m = live;
  m.id = live.id + QStringLiteral("_dataset");
  m.name = live.name + QStringLiteral(" (data set)");
  m.definition = QStringLiteral("The mean over the prompts of the last File > Scan Data Set of each prompt's score: ") +
                 live.definition +
                 QStringLiteral(" A prompt where the head has no score is left out of its mean.");
  m.source = HeadMetric::Source::External;
  m.compute = nullptr;
  return m;
}

}  // namespace

const std::vector<HeadMetric>& headMetrics() {
  static const std::vector<HeadMetric> metrics = [] {
    std::vector<HeadMetric> m = {
      detectorMetric(hs::HeadDetector::PreviousToken, QStringLiteral("previous-token"),
                     QStringLiteral("Attention from each position to the one before it, averaged over positions "
                                    "2 and later of this prompt.")),
      detectorMetric(hs::HeadDetector::DuplicateToken, QStringLiteral("duplicate-token"),
                     QStringLiteral("Attention to earlier occurrences of the same token, summed over them and "
                                    "averaged over the positions whose token occurred before.")),
      detectorMetric(hs::HeadDetector::Induction, QStringLiteral("induction"),
                     QStringLiteral("Attention to the tokens right after earlier occurrences of the current token, "
                                    "summed and averaged over the positions that have one (A B … A → B).")),
      copyingMetric(),
    };
    for (size_t i = 0; i < 3; ++i) m.push_back(datasetMetric(m[i]));
    return m;
  }();
  return metrics;
}

const HeadMetric* findHeadMetric(const QString& id) {
  for (const HeadMetric& m : headMetrics())
    if (m.id == id) return &m;
  return nullptr;
}

namespace {
std::mutex wanted_mutex;
std::vector<QString> wanted_model_metrics;

// Model metrics, once per loaded weights: the last values of each, with the weights they were
// computed from (a weak pointer, so a closed model is not kept alive by its scores).
struct Memo {
  QString id;
  std::weak_ptr<const hs::Weights> weights;
  HeadMetricValues values;
};
std::mutex memo_mutex;
std::vector<Memo> memo;
}  // namespace

void forgetModelMetrics() {
  {
    std::lock_guard<std::mutex> lock(wanted_mutex);
    wanted_model_metrics.clear();
  }
  std::lock_guard<std::mutex> lock(memo_mutex);
  memo.clear();
}

void wantModelMetric(const QString& id) {
  std::lock_guard<std::mutex> lock(wanted_mutex);
  if (std::find(wanted_model_metrics.begin(), wanted_model_metrics.end(), id) == wanted_model_metrics.end())
    wanted_model_metrics.push_back(id);
}

bool modelMetricWanted(const QString& id) {
  std::lock_guard<std::mutex> lock(wanted_mutex);
  return std::find(wanted_model_metrics.begin(), wanted_model_metrics.end(), id) != wanted_model_metrics.end();
}

std::vector<HeadMetricValues> computeHeadMetrics(const RunResult& run, const RunResult* previous) {
  std::vector<HeadMetricValues> out;
  const auto& weights = run.run.cache->weights();
  for (const HeadMetric& m : headMetrics()) {
    if (m.source == HeadMetric::Source::External || !m.compute) continue;
    if (m.source == HeadMetric::Source::Model) {
      std::lock_guard<std::mutex> lock(memo_mutex);
      bool found = false;
      for (const Memo& e : memo)
        if (e.id == m.id && e.weights.lock() == weights) {
          out.push_back(e.values);
          found = true;
        }
      if (found || !modelMetricWanted(m.id)) continue;
    }
    HeadMetricValues v;
    try {
      v = m.compute(run, previous ? previous->headMetric(m.id) : nullptr);
      v.id = m.id;
    } catch (const std::exception& e) {
      v = {m.id,
           hs::RowMatrixXf::Constant(run.n_layer(), run.n_head(), std::numeric_limits<float>::quiet_NaN()),
           QStringLiteral("could not compute %1: %2").arg(m.name, QString::fromStdString(e.what())), {}};
    }
    if (m.source == HeadMetric::Source::Model) {
      std::lock_guard<std::mutex> lock(memo_mutex);
      std::erase_if(memo, [&](const Memo& e) { return e.id == m.id; });
      memo.push_back({m.id, weights, v});
    }
    out.push_back(std::move(v));
  }
  return out;
}

QString headMetricText(const HeadMetric& metric, float value) {
  return std::isnan(value) ? QStringLiteral("—") : QString::number(value, 'f', metric.decimals);
}

QColor headMetricColor(const HeadMetric& metric, float value) {
  if (std::isnan(value)) return QColor(0xf2, 0xf2, 0xf2);
  const float span = metric.high - metric.low;
  const double t = span > 0.0f ? (value - metric.low) / span : 0.5;
  return QColor(colorAt(metric.colors, t));
}

}  // namespace hs::ui
