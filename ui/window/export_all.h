// File > Export All and headless --export: a PNG of every figure of every registered view
// (ui/views/registry.cpp), in registry order.
//
// The job owns its own, never-shown instance of each view, so the window does not change while
// it runs. It paints one figure per turn of the event loop (the window stays responsive between
// them), and computes the views' analyses, encodes PNGs and writes files on worker threads.
#pragma once

#include <QObject>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ui/controller/results.h"
#include "ui/views/analysis_view.h"

namespace hs::ui {

class FigureSource;
class Selection;

class ExportAllJob : public QObject {
  Q_OBJECT

 public:
  struct Options {
    QString out_dir;
    double scale = 1.0;                    // 2.0 for paper-ready figures
    int position = -1;                     // -1: the last token
    int layer = 0, head = 0;               // the selected head (views of one head or layer)
    std::optional<int32_t> target;         // empty: the predicted next token
    std::optional<int32_t> versus;         // a logit difference's second token (Selection::versus)
    // A view's inputs beyond the selection, by view id (AnalysisView::viewInputs of the window's
    // views), given to the job's own instance before it lists its figures.
    ViewInputsById view_inputs;
    // The window's last data-set scan (AnalysisView::setScan), for the views that show one.
    std::shared_ptr<const DataSetScan> scan;
  };

  ExportAllJob(std::shared_ptr<const RunResult> run, Options options, QObject* parent = nullptr);
  ~ExportAllJob() override;

  void start();
  // Every file written so far (full paths).
  const QStringList& written() const { return written_; }
  // The views that had nothing to export, each "View: why" (also in the finished message).
  const QStringList& skipped() const { return skipped_; }
  int total() const { return total_; }

 Q_SIGNALS:
  void progress(int done, int total, const QString& current);
  // Each figure as it is painted, before its file is written: what the PNG shows, for tests that
  // check every figure (each heatmap's colour scale has a title).
  void figurePainted(const hs::ui::FigureSource* source, const QString& file_name);
  // ok = every file was written; message = a one-line summary or the first error.
  void finished(bool ok, const QString& message);

 private:
  struct ViewState;
  struct Step;
  void step();
  void paint(ViewState& view, const ExportFigure& figure);
  void fail(const QString& message);
  void writeDone(const QString& path, const QString& error);
  void maybeFinish();

  std::shared_ptr<const RunResult> run_;
  Options options_;
  std::vector<std::unique_ptr<ViewState>> views_;
  std::vector<Step> steps_;
  size_t next_step_ = 0;
  int total_ = 0;
  int rendered_ = 0;
  int pending_writes_ = 0;
  bool failed_ = false;
  bool done_ = false;
  bool waiting_ = false;  // a worker computation is in flight; step() resumes when it lands
  QStringList written_;
  QStringList skipped_;  // views with nothing to export, each with why
};

}  // namespace hs::ui
