// What every analysis view is to the window, Export All and the headless exporter: a widget
// that draws the current run (and, if it has one, its own analysis of it, computed on a worker
// by the function its descriptor registers), a figure for "export this view", and the list of
// figures it adds to Export All. Views are listed in ui/views/registry.cpp, and nothing above
// this floor names a particular view.
#pragma once

#include <QSize>
#include <QString>
#include <QStringList>
#include <QVariantMap>
#include <QWidget>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "ui/base/figure.h"
#include "ui/controller/results.h"

class QMenu;

namespace hs { struct ScanState; }

namespace hs::ui {

class Selection;

// What a person gave a view beyond the selection (the patching view's corrupted prompt), by the
// name of the view's option (ViewOption::name); each value has its option's type.
using ViewInputs = QVariantMap;
// Every view's inputs, by view id: how the command line reaches the window's views and Export All's.
using ViewInputsById = std::map<QString, ViewInputs>;

// One command-line option of a view: `headscope --NAME VALUE` sets the view's input NAME, in the
// window and in --export alike. The app builds its parser from these, so a view's options are
// declared only here.
struct ViewOption {
  enum class Type { Text, Integer, Number };  // the value: QString, int, double
  QString name;        // "corrupt": --corrupt, and the key in ViewInputs
  QString value_name;  // "TEXT", in --help
  QString help;        // one line for --help
  Type type = Type::Text;
  QStringList choices;  // Text: the values it takes (empty: any text); anything else is refused
};

// The value `text` gives `option`, of the option's type, or nullopt with `error` saying why
// ("--layer must be an integer (got 'x')").
std::optional<QVariant> parseViewOption(const ViewOption& option, const QString& text, QString* error);

// A data-set scan's results (File > Scan Data Set as it finishes, or a file of headscope-cli scan
// opened with File > Open Scan Results), for the views that show one. Made with the model of
// state->settings["model"]["fingerprint"]: a view shows it only on runs of that model.
struct DataSetScan {
  std::shared_ptr<const hs::ScanState> state;
  QString source;  // where it came from, for titles: the file opened, or what was scanned
};

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

// A unit below the head that one view points at and another shows: the Graph view's feature node
// opening in the Features view (its activations and dashboard).
struct UnitRef {
  bool neuron = false;  // an MLP neuron of `layer`; else latent `unit` of the loaded SAE `sae_id`
  QString sae_id;       // LoadedSaes id
  int layer = -1;
  int unit = -1;
  int pos = -1;         // the position to select (-1: leave it)
};

class AnalysisView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  AnalysisView(Selection* selection, QWidget* parent);

  // Each new run, before any analysis computed from it.
  virtual void setRun(std::shared_ptr<const RunResult> run) = 0;
  // The view's own analysis of the current run (views whose descriptor computes one).
  virtual void setResult(std::shared_ptr<const ViewResult> result);
  // The window's last data-set scan (null: none yet). Views that do not show one ignore it.
  virtual void setScan(std::shared_ptr<const DataSetScan>) {}
  // The analysis shown now, or null; the window asks again only when the key or the run differs.
  virtual std::shared_ptr<const ViewResult> result() const { return nullptr; }
  // The figures this view adds to Export All for `run`, in order, for the view's selection.
  virtual std::vector<ExportFigure> exportFigures(const RunResult& run) = 0;
  // Why exportFigures(run) gave nothing, for Export All to say ("" when it gave figures): a view
  // with nothing to show exports no empty figure.
  virtual QString exportSkipReason(const RunResult&) const { return {}; }

  // What the person typed into the view beyond the selection (a view whose analysis has
  // AnalysisKey::params), so that Export All's own instance of the view can be set up the same,
  // and what the command line gives it (its descriptor's options). Empty: nothing typed. A view
  // reads only the names it declares; a name missing from `inputs` means an empty field.
  virtual ViewInputs viewInputs() const { return {}; }
  virtual void setViewInputs(const ViewInputs&) {}
  // The key of this view's analysis for the selection now, from `selected` (the parts its
  // descriptor reads): a live analysis with inputs beyond the selection (a method, a number of
  // steps) puts them in params, and a view with modes adds the parts of the selection only one
  // mode reads. The window asks with this key, and again on analysisKeyChanged.
  virtual AnalysisKey analysisKey(AnalysisKey selected) const { return selected; }
  // A long analysis on its way (AnalysisSpec::compute_long), and why it failed: only for views
  // that request their analysis themselves (AnalysisSpec::on_demand). Default: nothing.
  virtual void showProgress(double fraction, const QString& what);
  virtual void showFailure(const QString& message);
  // Shows `unit` if this view shows units of its kind (and returns true): the window then brings
  // the view to the front. Default: not a view of units.
  virtual bool showUnit(const UnitRef&) { return false; }

  // FigureSource: by default the whole view as it is shown.
  QSize figureSize() const override { return size(); }
  void paintFigure(QPainter& painter, QSize size) override;

 Q_SIGNALS:
  // An on-demand view asks for its analysis (the window passes it to the controller under the
  // view's id), or for the one in flight to stop.
  void analysisRequested(const hs::ui::AnalysisKey& key);
  void cancelRequested();
  // What analysisKey() gives changed (a mode or an input beyond the selection): the window asks
  // for the analysis again.
  void analysisKeyChanged();
  // Right-click on a head somewhere in the view: the window adds what can be done to a head
  // (ablate it) to `menu`.
  void headContextMenu(int layer, int head, QMenu* menu);
  // The view shows a head metric computed with the run (a Model metric it has just asked for,
  // wantModelMetric) that the current run lacks: run the prompt again.
  void runWanted();
  // The view points at a unit another view shows (a double-clicked graph node): the window asks
  // each view to show it (showUnit) and brings the first that does to the front.
  void unitRequested(const hs::ui::UnitRef& unit);

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
  // Its command-line options, one per input it takes beyond the selection (setViewInputs). Their
  // names share the command line with the app's own options and every other view's.
  std::vector<ViewOption> options;
  // compute empty: the view draws from the run alone. spec.id is the view's id.
  AnalysisSpec analysis;
  std::function<AnalysisView*(Selection* selection, QWidget* parent)> create;
};

// The key of `reads` (SelectionPart bits) from the selection.
AnalysisKey keyFromSelection(const Selection& selection, unsigned reads);

}  // namespace hs::ui
