// Turning what a view shows into a figure file (PNG, SVG or PDF), titled with the model, the
// prompt and the head.
//
// Painting a widget has to happen on the GUI thread, so a figure is painted there, once, into an
// image or a vector recording; encoding (PNG compression is the slow part) and writing the file
// run on a worker. Files are written atomically (QSaveFile): a failed export leaves no partial
// file and an existing file untouched.
#pragma once

#include <QByteArray>
#include <QImage>
#include <QSize>
#include <QString>
#include <QStringList>

class QCustomPlot;
class QMenu;
class QPainter;
class QWidget;

namespace hs::ui {

// The words above a figure: "L1H3 attention pattern" / "headscope-tiny · “The cat sat…” · 12 tokens".
struct FigureText {
  QString title;
  QString subtitle;
};

// Anything that can be drawn as a figure: one plot, or a whole view.
class FigureSource {
 public:
  virtual ~FigureSource() = default;
  virtual FigureText figureText() const = 0;
  // The logical size of the body: what the view currently shows.
  virtual QSize figureSize() const = 0;
  // Paints the body into [0, 0, size]; the painter may be scaled (2x PNG) or vector (SVG, PDF).
  // GUI thread only. Plots inside are drawn with paintPlotInto or renderWidgetInto below.
  virtual void paintFigure(QPainter& painter, QSize size) = 0;
  // A short file-name stem ("attention_L1H3").
  virtual QString figureFileStem() const = 0;
};

enum class FigureFormat { Png, Svg, Pdf };

// Height of the title band above the body, in logical pixels.
int figureTitleHeight();
// The full figure's logical size: the body plus the title band.
QSize figureOuterSize(QSize body);

// GUI thread: paints the title band and the body into an image `scale` times the logical size.
QImage renderFigureImage(FigureSource& source, QSize body, double scale);
// GUI thread: the figure as SVG or PDF bytes (vector where the source paints vectors).
QByteArray renderFigureVector(FigureSource& source, QSize body, FigureFormat format);

// Any thread: PNG bytes, with the title and subtitle stored as PNG text chunks.
QByteArray encodePng(const QImage& image, const FigureText& text);
// Any thread: writes atomically; returns an empty string on success, else a message naming the
// path and the reason.
QString writeFileAtomically(const QString& path, const QByteArray& bytes);

// "png", "svg", "pdf"
QString figureExtension(FigureFormat format);

// GUI: asks where to save (remembering the last folder), renders, and encodes + writes on a
// worker; reports a failure in a dialog on `parent`. `scale` applies to PNG.
void saveFigureInteractively(QWidget* parent, FigureSource& source, FigureFormat format, double scale);

// Adds "Save as PNG… / PNG (2×)… / SVG… / PDF…" to a context menu.
void addFigureExportActions(QMenu& menu, QWidget* parent, FigureSource& source);

// Renders a widget and everything in it; its QCustomPlot children are drawn through their own
// painter path, so they stay sharp at any scale and vector in SVG and PDF.
void renderWidgetInto(QWidget* widget, QPainter& painter);
// Draws one plot at `size` through QCustomPlot's painter path (see renderWidgetInto).
void paintPlotInto(QCustomPlot* plot, QPainter& painter, QSize size);

}  // namespace hs::ui
