#include "ui/base/figure.h"

#include <QBuffer>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QImageWriter>
#include <QMenu>
#include <QMessageBox>
#include <QPageSize>
#include <QPdfWriter>
#include <QPointer>
#include <QSaveFile>
#include <QSettings>
#include <QSvgGenerator>
#include <QWidget>
#include <QtConcurrent/QtConcurrentRun>

#include <cmath>
#include <utility>

#include "qcustomplot.h"
#include "ui/base/deliver.h"

namespace hs::ui {
namespace {

// The painter of the figure being painted. Every figure is painted through a QCPPainter made
// here (QCustomPlot draws only through one), while FigureSource sees a plain QPainter, so that
// QCustomPlot stays out of the views' headers; paintPlotInto finds its QCPPainter again here.
QCPPainter* g_figure_painter = nullptr;

QCPPainter* asPlotPainter(QPainter& painter) {
  return g_figure_painter && static_cast<QPainter*>(g_figure_painter) == &painter ? g_figure_painter : nullptr;
}

void paintTitleBand(QPainter& p, int width, const FigureText& text) {
  const int h = figureTitleHeight();
  p.fillRect(QRect(0, 0, width, h), Qt::white);
  QFont title = p.font();
  title.setPixelSize(17);
  title.setBold(true);
  p.setFont(title);
  p.setPen(QColor(0x20, 0x20, 0x20));
  const QRect titleRect(16, 8, width - 32, 24);
  p.drawText(titleRect, Qt::AlignLeft | Qt::AlignVCenter,
             QFontMetrics(title).elidedText(text.title, Qt::ElideRight, titleRect.width()));
  QFont sub = title;
  sub.setBold(false);
  sub.setPixelSize(12);
  p.setFont(sub);
  p.setPen(QColor(0x60, 0x60, 0x60));
  const QRect subRect(16, 34, width - 32, 18);
  p.drawText(subRect, Qt::AlignLeft | Qt::AlignVCenter,
             QFontMetrics(sub).elidedText(text.subtitle, Qt::ElideRight, subRect.width()));
  p.setPen(QPen(QColor(0xdd, 0xdd, 0xdd), 1));
  p.drawLine(QPointF(16, h - 2.5), QPointF(width - 16, h - 2.5));
}

void paintFigure(FigureSource& source, QCPPainter& p, QSize body) {
  const QSize outer = figureOuterSize(body);
  p.fillRect(QRect(QPoint(0, 0), outer), Qt::white);
  paintTitleBand(p, outer.width(), source.figureText());
  p.save();
  p.translate(0, figureTitleHeight());
  p.setClipRect(QRect(QPoint(0, 0), body));
  QCPPainter* const outer_painter = std::exchange(g_figure_painter, &p);
  source.paintFigure(p, body);
  g_figure_painter = outer_painter;
  p.restore();
}

}  // namespace

int figureTitleHeight() { return 60; }

QSize figureOuterSize(QSize body) { return QSize(body.width(), body.height() + figureTitleHeight()); }

QString figureExtension(FigureFormat format) {
  switch (format) {
    case FigureFormat::Png: return QStringLiteral("png");
    case FigureFormat::Svg: return QStringLiteral("svg");
    case FigureFormat::Pdf: return QStringLiteral("pdf");
  }
  return {};
}

QImage renderFigureImage(FigureSource& source, QSize body, double scale) {
  const QSize outer = figureOuterSize(body);
  QImage image(static_cast<int>(std::lround(outer.width() * scale)), static_cast<int>(std::lround(outer.height() * scale)),
               QImage::Format_ARGB32_Premultiplied);
  image.fill(Qt::white);
  QCPPainter p(&image);
  p.setRenderHint(QPainter::Antialiasing);
  p.setRenderHint(QPainter::TextAntialiasing);
  if (scale != 1.0) p.setMode(QCPPainter::pmNonCosmetic);  // scale cosmetic pens too
  p.scale(scale, scale);
  paintFigure(source, p, body);
  p.end();
  // 96 dpi at 1x, so a 2x image prints at the same physical size with twice the detail. Set only
  // now: while painting, the image's resolution would scale every font a second time.
  const int dots_per_meter = static_cast<int>(std::lround(96.0 * scale / 0.0254));
  image.setDotsPerMeterX(dots_per_meter);
  image.setDotsPerMeterY(dots_per_meter);
  return image;
}

QByteArray renderFigureVector(FigureSource& source, QSize body, FigureFormat format) {
  const QSize outer = figureOuterSize(body);
  const FigureText text = source.figureText();
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (format == FigureFormat::Svg) {
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(outer);
    svg.setViewBox(QRect(QPoint(0, 0), outer));
    svg.setResolution(96);
    svg.setTitle(text.title);
    svg.setDescription(text.subtitle);
    QCPPainter p(&svg);
    p.setMode(QCPPainter::pmVectorized);
    p.setMode(QCPPainter::pmNoCaching);
    paintFigure(source, p, body);
    p.end();
  } else {
    QPdfWriter pdf(&buffer);
    pdf.setCreator(QStringLiteral("HeadScope"));
    pdf.setTitle(text.title);
    pdf.setResolution(96);
    pdf.setPageSize(QPageSize(QSizeF(outer) * 72.0 / 96.0, QPageSize::Point, QString(), QPageSize::ExactMatch));
    pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
    QCPPainter p(&pdf);
    p.setMode(QCPPainter::pmVectorized);
    p.setMode(QCPPainter::pmNoCaching);
    paintFigure(source, p, body);
    p.end();
  }
  return bytes;
}

QByteArray encodePng(const QImage& image, const FigureText& text) {
  // Figures are drawn on white: no alpha channel, so the file is RGB and smaller.
  QImage copy = image.convertToFormat(QImage::Format_RGB32);
  copy.setText(QStringLiteral("Title"), text.title);
  copy.setText(QStringLiteral("Description"), text.subtitle);
  copy.setText(QStringLiteral("Software"), QStringLiteral("HeadScope " HEADSCOPE_VERSION));
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  QImageWriter writer(&buffer, "png");  // Qt's default zlib level; setCompression() would turn it off
  if (!writer.write(copy)) return {};
  return bytes;
}

QString writeFileAtomically(const QString& path, const QByteArray& bytes) {
  if (bytes.isEmpty()) return QStringLiteral("Could not write %1: the figure could not be encoded.").arg(path);
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly))
    return QStringLiteral("Could not write %1: %2. Choose a folder you can write to.").arg(path, file.errorString());
  if (file.write(bytes) != bytes.size()) {
    const QString reason = file.errorString();
    file.cancelWriting();
    return QStringLiteral("Could not write %1: %2.").arg(path, reason);
  }
  if (!file.commit()) return QStringLiteral("Could not write %1: %2.").arg(path, file.errorString());
  return {};
}

void saveFigureInteractively(QWidget* parent, FigureSource& source, FigureFormat format, double scale) {
  QSettings settings;
  const QString folder = settings.value(QStringLiteral("export/lastFolder"), QDir::homePath()).toString();
  const QString ext = figureExtension(format);
  const QString suggested = QDir(folder).filePath(source.figureFileStem() + (scale > 1.0 ? "@2x." : ".") + ext);
  const QString filter = QStringLiteral("%1 image (*.%2)").arg(ext.toUpper(), ext);
  QString path = QFileDialog::getSaveFileName(parent, QStringLiteral("Save Figure"), suggested, filter);
  if (path.isEmpty()) return;
  if (QFileInfo(path).suffix().isEmpty()) path += "." + ext;
  settings.setValue(QStringLiteral("export/lastFolder"), QFileInfo(path).absolutePath());

  const QSize body = source.figureSize();
  const FigureText text = source.figureText();
  QFuture<QString> written;
  if (format == FigureFormat::Png) {
    const QImage image = renderFigureImage(source, body, scale);
    written = QtConcurrent::run([image, text, path] { return writeFileAtomically(path, encodePng(image, text)); });
  } else {
    const QByteArray bytes = renderFigureVector(source, body, format);
    written = QtConcurrent::run([bytes, path] { return writeFileAtomically(path, bytes); });
  }
  QPointer<QWidget> guard(parent);
  deliverLater(written, parent, [guard](const QString& error) {
    if (!error.isEmpty() && guard) QMessageBox::warning(guard, QStringLiteral("Export failed"), error);
  });
}

void addFigureExportActions(QMenu& menu, QWidget* parent, FigureSource& source) {
  FigureSource* src = &source;
  menu.addAction(QStringLiteral("Save as PNG…"), parent,
                 [parent, src] { saveFigureInteractively(parent, *src, FigureFormat::Png, 1.0); });
  menu.addAction(QStringLiteral("Save as PNG (2× resolution)…"), parent,
                 [parent, src] { saveFigureInteractively(parent, *src, FigureFormat::Png, 2.0); });
  menu.addAction(QStringLiteral("Save as SVG…"), parent,
                 [parent, src] { saveFigureInteractively(parent, *src, FigureFormat::Svg, 1.0); });
  menu.addAction(QStringLiteral("Save as PDF…"), parent,
                 [parent, src] { saveFigureInteractively(parent, *src, FigureFormat::Pdf, 1.0); });
}

void paintPlotInto(QCustomPlot* plot, QPainter& painter, QSize size) {
  if (QCPPainter* p = asPlotPainter(painter)) {
    plot->toPainter(p, size.width(), size.height());
  } else {
    // Not inside a figure (no QCPPainter to hand): paint the plot as the screen shows it.
    plot->render(&painter, QPoint(0, 0), QRegion(), QWidget::DrawChildren);
  }
}

void renderWidgetInto(QWidget* widget, QPainter& painter) {
  // Everything but the plots comes from the widgets' own painting; the plots are then drawn
  // through QCustomPlot's painter path, which stays sharp at any scale and vector in SVG/PDF.
  QList<QCustomPlot*> plots = widget->findChildren<QCustomPlot*>();
  if (auto* self = qobject_cast<QCustomPlot*>(widget)) plots.prepend(self);
  QRegion rest(widget->rect());
  for (QCustomPlot* plot : plots)
    if (plot->isVisibleTo(widget) || plot == widget) rest -= QRect(plot->mapTo(widget, QPoint(0, 0)), plot->size());
  if (!rest.isEmpty())
    widget->render(&painter, QPoint(0, 0), rest, QWidget::DrawWindowBackground | QWidget::DrawChildren);
  for (QCustomPlot* plot : plots) {
    if (!(plot->isVisibleTo(widget) || plot == widget)) continue;
    const QPoint offset = plot == widget ? QPoint(0, 0) : plot->mapTo(widget, QPoint(0, 0));
    painter.save();
    painter.translate(offset);
    painter.setClipRect(QRect(QPoint(0, 0), plot->size()), Qt::IntersectClip);
    paintPlotInto(plot, painter, plot->size());
    painter.restore();
  }
}

}  // namespace hs::ui
