// The heads panel's "Scores:" control: which head metric (ui/controller/head_metrics.h) the head
// grid shows as a badge on every thumbnail, whether the grid is sorted by it (highest first) and
// whether it shows only the heads scoring at least a threshold; with the metric's colour key and
// a line on what the scores averaged. It owns what the grid shows: setRun draws a run's
// thumbnails with the current choice, and every change of the choice redraws the grid.
//
// Per keystroke it costs one pass over the items the grid is rebuilt with anyway (a formatted
// number and a colour per head); tooltips are made only when the mouse rests on a head.
#pragma once

#include <QString>
#include <QWidget>

#include <map>
#include <memory>
#include <optional>

#include "ui/controller/head_metrics.h"
#include "ui/controller/results.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QHBoxLayout;
class QLabel;

namespace hs::ui {

class ColorLegend;
class ImageGridView;

class HeadMetricsBar : public QWidget {
  Q_OBJECT

 public:
  // `grid`: the head grid this control draws into (not owned).
  explicit HeadMetricsBar(ImageGridView* grid, QWidget* parent = nullptr);

  // Shows `run` in the grid with the current metric, order and filter.
  void setRun(std::shared_ptr<const RunResult> run);
  // Values of a registered metric from elsewhere (an External metric's, e.g. a data-set scan's):
  // listed in the control from now on and shown whenever it is chosen, in place of any the runs
  // compute, until replaced or cleared. Values made with another model than the run's (their
  // `model` fingerprint) are not shown on it: the note names the model they belong to, and they
  // show again when a run of that model comes back.
  void setExternalValues(HeadMetricValues values);
  void clearExternalValues(const QString& id);

  QString metricId() const;  // empty: no badges
  void setMetricId(const QString& id);
  bool sorted() const;
  void setSorted(bool sorted);
  std::optional<float> threshold() const;  // nullopt: every head shown
  void setThreshold(std::optional<float> threshold);
  // The choice from / into QSettings ("heads/metric", "heads/sorted", "heads/filter",
  // "heads/threshold"), so that it survives a restart.
  void restoreSettings();
  void saveSettings() const;
  // The values the grid shows now (null when none or no metric is chosen).
  const HeadMetricValues* currentValues() const;

  // As narrow as the control gets with its options on a row of their own, whichever row they are on
  // now (so the panel can always be dragged narrower).
  QSize minimumSizeHint() const override;

  QComboBox* metricCombo() const { return combo_; }
  QCheckBox* sortCheck() const { return sort_; }
  QCheckBox* filterCheck() const { return filter_; }
  QDoubleSpinBox* thresholdSpin() const { return threshold_; }
  QLabel* noteLabel() const { return note_; }
  ColorLegend* legend() const { return legend_; }

 Q_SIGNALS:
  // The metric, the order or the filter changed (the grid already shows it).
  void changed();
  // A metric computed with the run (a Model metric shown for the first time) is missing from
  // the current run: run the prompt again.
  void runWanted();

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void placeOptions(bool beside);
  void rebuildCombo();
  void onChoiceChanged();
  void refresh();
  QString tooltipFor(int index) const;
  // The values of metric `id` for the current run: External values when they were made with the
  // run's model, else the run's own (null when there are none).
  const HeadMetricValues* valuesFor(const QString& id) const;

  ImageGridView* grid_;
  QHBoxLayout* top_;
  QHBoxLayout* options_;
  bool options_beside_ = false;
  bool options_placed_ = false;
  QLabel* label_;
  QComboBox* combo_;
  QCheckBox* sort_;
  QCheckBox* filter_;
  QDoubleSpinBox* threshold_;
  ColorLegend* legend_;
  QLabel* note_;
  std::shared_ptr<const RunResult> run_;
  std::map<QString, HeadMetricValues> external_;
};

}  // namespace hs::ui
