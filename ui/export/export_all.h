// Writes a PNG of every view: each head's attention pattern, an overview of all heads, the
// contributions (write norms and logit attribution) at the selected position, and the
// concat-vs-sum view of every layer.
//
// The job owns its own, never-shown copies of the views, so the window does not change while it
// runs. It paints one figure per turn of the event loop (the window stays responsive between
// them), and computes layer analyses, encodes PNGs and writes files on worker threads.
#pragma once

#include <QFutureSynchronizer>
#include <QObject>
#include <QSize>
#include <QStringList>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ui/controller/results.h"

namespace hs::ui {

class AttentionView;
class ConcatSumView;
class ContributionsView;
class ImageGridView;
class Selection;

class ExportAllJob : public QObject {
  Q_OBJECT

 public:
  struct Options {
    QString out_dir;
    double scale = 1.0;                    // 2.0 for paper-ready figures
    int position = -1;                     // -1: the last token
    std::optional<int32_t> target;         // empty: the predicted next token
    QSize attention_size{1200, 820};   // the attention view the patterns are taken from
    QSize pattern_size{820, 780};      // each head's pattern figure
    QSize overview_size{900, 1400};  // width, and the most height it may take
    QSize contributions_size{1400, 900};
    QSize concat_size{1600, 1000};
  };

  ExportAllJob(std::shared_ptr<const RunResult> run, Options options, QObject* parent = nullptr);
  ~ExportAllJob() override;

  void start();
  // Every file written so far (full paths).
  const QStringList& written() const { return written_; }
  int total() const { return total_; }

 Q_SIGNALS:
  void progress(int done, int total, const QString& current);
  // ok = every file was written; message = a one-line summary or the first error.
  void finished(bool ok, const QString& message);

 private:
  void step();
  void renderAndWrite(class FigureSource& source, QSize body, const QString& stem);
  void fail(const QString& message);
  void writeDone(const QString& path, const QString& error);
  void maybeFinish();

  std::shared_ptr<const RunResult> run_;
  Options options_;
  std::unique_ptr<Selection> selection_;
  std::unique_ptr<AttentionView> attention_;
  std::unique_ptr<ContributionsView> contributions_;
  std::unique_ptr<ConcatSumView> concat_;
  std::unique_ptr<ImageGridView> overview_;
  std::vector<std::function<void()>> steps_;
  size_t next_step_ = 0;
  int total_ = 0;
  int rendered_ = 0;
  int pending_writes_ = 0;
  bool failed_ = false;
  bool done_ = false;
  bool waiting_ = false;  // a worker computation is in flight; step() resumes when it lands
  QStringList written_;
};

}  // namespace hs::ui
