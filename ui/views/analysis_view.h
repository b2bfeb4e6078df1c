// What every analysis view is to the window, Export All and the headless exporter: a widget
// that draws the current run (and, if it has one, its own analysis of it, computed on a worker
// by the function its descriptor registers), a figure for "export this view", and the list of
// figures it adds to Export All. Views are listed in ui/views/registry.cpp, and nothing above
// this floor names a particular view.
#pragma once

#include <QSize>
#include <QString>
#include <QWidget>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ui/base/figure.h"
#include "ui/controller/results.h"

class QMenu;

namespace hs::ui {

class Selection;

// One figure of Export All: `analysis` (when set) is computed first and handed to the view with
// setResult; then `prepare` runs on the GUI thread and says what to paint, at which size.
struct ExportFigure {
  struct Target {
    FigureSource* source = nullptr;
    QSize size;
  };
  std::optional<AnalysisKey> analysis;
  std::function<Target()> prepare;
};

class AnalysisView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  AnalysisView(Selection* selection, QWidget* parent);

  // Each new run, before any analysis computed from it.
  virtual void setRun(std::shared_ptr<const RunResult> run) = 0;
  // The view's own analysis of the current run (views whose descriptor computes one).
  virtual void setResult(std::shared_ptr<const ViewResult> result);
  // The analysis shown now, or null; the window asks again only when the key or the run differs.
  virtual std::shared_ptr<const ViewResult> result() const { return nullptr; }
  // The figures this view adds to Export All for `run`, in order, for the view's selection.
  virtual std::vector<ExportFigure> exportFigures(const RunResult& run) = 0;

  // What the person typed into the view beyond the selection (a view whose analysis has
  // AnalysisKey::params), so that Export All's own instance of the view can be set up the same.
  virtual QStringList viewInputs() const { return {}; }
  virtual void setViewInputs(const QStringList&) {}
  // A long analysis on its way (AnalysisSpec::compute_long), and why it failed: only for views
  // that request their analysis themselves (AnalysisSpec::on_demand). Default: nothing.
  virtual void showProgress(double fraction, const QString& what);
  virtual void showFailure(const QString& message);

  // FigureSource: by default the whole view as it is shown.
  QSize figureSize() const override { return size(); }
  void paintFigure(QPainter& painter, QSize size) override;

 Q_SIGNALS:
  // An on-demand view asks for its analysis (the window passes it to the controller under the
  // view's id), or for the one in flight to stop.
  void analysisRequested(const hs::ui::AnalysisKey& key);
  void cancelRequested();
  // Right-click on a head somewhere in the view: the window adds what can be done to a head
  // (ablate it) to `menu`.
  void headContextMenu(int layer, int head, QMenu* menu);

 protected:
  // Right-click outside its plots: save the whole view (each plot offers its own figure).
  void contextMenuEvent(QContextMenuEvent* event) override;

  Selection* selection_;
};

// A view's entry in the registry.
struct ViewDescriptor {
  QString id;         // "contributions": --view NAME, the analysis id
  QString title;      // the tab: "Contributions"
  QString menu_text;  // View menu: "&Contributions"
  QString help;       // one line for --help
  QSize export_size;  // the size the view is laid out at for Export All
  // compute empty: the view draws from the run alone. spec.id is the view's id.
  AnalysisSpec analysis;
  std::function<AnalysisView*(Selection* selection, QWidget* parent)> create;
};

// The key of `reads` (SelectionPart bits) from the selection.
AnalysisKey keyFromSelection(const Selection& selection, unsigned reads);

}  // namespace hs::ui
