// A matrix drawn as a heatmap with labelled rows and columns, a colour scale, highlight bands,
// tooltips and clicks. Wraps QCustomPlot, which stays hidden behind this class: views talk to
// HeatmapView only.
//
// Row 0 is drawn at the top (query position 0 first); cells are never interpolated. A NaN cell
// is "masked" (e.g. attention to a later position) and drawn as a grey hatch, not as a colour.
#pragma once

#include <QImage>
#include <QPointer>
#include <QStringList>
#include <QWidget>

#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "ui/base/figure.h"
#include "ui/style/colormap.h"

class QCustomPlot;
class QCPColorScale;
class QCPItemRect;
class QCPLayerable;
class QCPPainter;
class QCPTextElement;
class QMenu;
class QMouseEvent;
class QWheelEvent;

namespace hs::ui {

class CellsPlottable;

// Row `row` of a matrix: its first cells, NaN for a masked one. A row shorter than the matrix is
// masked after its end (a causal attention row ends at its query).
using HeatmapRow = std::function<std::span<const float>(int row)>;

struct HeatmapCells;

class HeatmapView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  // How the colour range is chosen: fixed (patterns: [0, 1]), symmetric around 0 from the data
  // (signed quantities), or [0, max] from the data (norms, |differences|).
  enum class RangeMode { Fixed, Symmetric, ZeroToMax };

  explicit HeatmapView(QWidget* parent = nullptr);
  ~HeatmapView() override;

  // Colours a matrix of `rows` rows read through `row` (it must stay valid as long as the
  // cells), or a row-major [rows, cols] one, for drawing. Thread-safe.
  // `window` > 0: row r's cells before column r - window + 1 are masked too (the keys a
  // sliding-window layer's query cannot read), drawn with the same hatch as the cells after the row.
  static std::shared_ptr<const HeatmapCells> prepareCells(int rows, int cols, HeatmapRow row, ColorMap map,
                                                          RangeMode mode, double lo = 0.0, double hi = 1.0,
                                                          int window = 0);
  static std::shared_ptr<const HeatmapCells> prepareCells(int rows, int cols, std::vector<float> values, ColorMap map,
                                                          RangeMode mode, double lo = 0.0, double hi = 1.0);

  // Row-major [rows, cols]; NaN marks a masked cell. Coloured here, on the calling thread.
  void setMatrix(int rows, int cols, std::vector<float> values);
  // Cells prepared elsewhere; recoloured here only if their colours differ from this view's.
  void setCells(std::shared_ptr<const HeatmapCells> cells);
  void clear();
  int rowCount() const { return rows_; }
  int columnCount() const { return cols_; }
  // The value of a cell as handed to the plot, and the colour the plot draws it in (for tests).
  double plottedValue(int row, int col) const;
  QRgb plottedColor(int row, int col) const;
  // The matrix as given and coloured for drawing.
  const std::shared_ptr<const HeatmapCells>& cells() const { return cells_; }

  void setColorMap(ColorMap map);
  void setRangeMode(RangeMode mode, double lo = 0.0, double hi = 1.0);
  double rangeLower() const;
  double rangeUpper() const;
  void setColorScaleTitle(const QString& title);
  void setColorScaleVisible(bool visible);
  // What a figure of this heatmap shows beside the cells: the colour scale (when the heatmap has
  // cells and the scale is wanted) and its title.
  bool colorScaleShown() const;
  QString colorScaleTitle() const;
  // Small plots side by side: a thinner colour bar with fewer ticks, tighter margins.
  void setCompact(bool compact);
  // Hide the row labels when a neighbouring plot with the same rows shows them.
  void setRowTickLabelsVisible(bool visible);

  // Labels of rows / columns (token labels); empty = numeric ticks. A label longer than a cap
  // (about 18 characters' width) is shortened with an ellipsis; the label area is as wide as the
  // longest shown label needs, and hovering it shows the full text. Labels are thinned by the
  // size of a cell on screen at the current zoom: every label when a cell is a line of text tall,
  // else every k-th (k from the cell size), always with the selected and hovered position's.
  void setRowLabels(const QStringList& labels);
  void setColumnLabels(const QStringList& labels);
  void setAxisTitles(const QString& rows, const QString& columns);
  void setColumnLabelsRotated(bool rotated);
  void setTitle(const QString& title);
  QString title() const;
  // Veils the cells in white (the colour scale stays): a result kept on screen that is no longer
  // the current setting's, as the view's title says.
  void setGreyed(bool greyed);
  bool greyed() const;

  // Bands of `size` rows/columns (one per head) with lines between them and labels
  // prefix0, prefix1, ... at their centres; `highlighted` is outlined (-1: none).
  void setRowBands(int size, const QString& prefix, int highlighted = -1);
  void setColumnBands(int size, const QString& prefix, int highlighted = -1);
  void setHighlightedRowBand(int band);
  void setHighlightedColumnBand(int band);

  void setHighlightedRow(int row);              // the selected row, outlined
  void setHighlightedCell(int row, int col);    // the selected cell, outlined
  void setHoverRow(int row);                    // a lighter outline that follows the mouse
  // Exported figures never show the hover outline, and show the selected row and cell outlines
  // only when this is on (off by default: an export is the data, not where the pointer was). The
  // row and column band highlights (a head's band) are part of the figure and always drawn.
  void setSelectionInExports(bool on) { selection_in_exports_ = on; }
  int highlightedRow() const { return highlighted_row_; }
  std::pair<int, int> highlightedCell() const { return {cell_row_, cell_col_}; }  // (-1, -1): none

  // Zoom and pan, for a matrix whose rows and columns are the same positions (an attention
  // pattern: query x key). One window of positions applies to both axes, so cells stay square
  // and the diagonal stays the diagonal. The wheel zooms around the pointer (the point of the
  // diagonal nearest to it stays put: with one window for both axes that is the best fit to
  // "the cell under the pointer stays under it"), a drag pans, a double-click resets. The window
  // survives new cells of the same or a larger size (a prompt that grows keeps showing the same
  // positions); it is clamped when the matrix shrinks. Off by default.
  void setPositionZoom(bool on);
  bool isZoomed() const { return zoomed_; }
  // The positions shown, first and last (0 and n - 1 when not zoomed; (0, -1) when empty).
  std::pair<int, int> visiblePositions() const;
  // Shows positions first..last (clamped; at least kMinZoomPositions of them).
  void setVisiblePositions(int first, int last);
  void resetZoom();
  // "positions 120–180" while zoomed, else empty. Exports show what the screen shows, so their
  // title carries it (see figureText()).
  QString zoomCaption() const;
  static constexpr int kMinZoomPositions = 4;
  // The labels the axes show now (tests).
  int shownRowLabelCount() const { return shown_row_labels_; }
  int shownColumnLabelCount() const { return shown_col_labels_; }
  // The text the row axis shows at `row` (empty: no label there), and the font of tick labels.
  QString rowTickLabel(int row) const;
  QFont tickLabelFont() const;
  // Over the row or column labels (widget coordinates): the full label there, with its position,
  // as its tooltip shows it; empty elsewhere.
  QString labelTextAt(const QPoint& widget_pos) const;

  void setTooltipFormatter(std::function<QString(int row, int col, float value)> formatter);

  // Text inside each cell, row-major like the matrix (empty: none): elided to the cell's width,
  // in black or white, whichever reads on the cell's colour. Cells too small for a line of text
  // show none (the tooltip can still say it).
  void setCellTexts(QStringList texts);
  const QStringList& cellTexts() const { return cell_texts_; }

  // Figure export.
  void setFigureText(const FigureText& text, const QString& file_stem);
  FigureText figureText() const override;
  QSize figureSize() const override;
  void paintFigure(QPainter& painter, QSize size) override;
  QString figureFileStem() const override { return file_stem_; }

  // Where the cells are drawn, in widget coordinates (after the last layout).
  QRect cellArea() const;
  // The cell at a widget position, or (-1, -1).
  QPoint cellAt(const QPoint& widget_pos) const;
  // The widget position of a cell's centre (tests click there).
  QPoint cellCenter(int row, int col) const;
  // Forces an immediate replot (tests and export; normally replots are queued and merged).
  void replotNow();

 Q_SIGNALS:
  void cellClicked(int row, int col);
  void cellHovered(int row, int col);  // (-1, -1) when the mouse leaves the cells
  // Right-click on a cell: receivers add their actions to `menu` (the export actions follow).
  void cellContextMenu(int row, int col, QMenu* menu);
  void zoomChanged();  // the window of visible positions moved, grew, shrank or was reset

 protected:
  void resizeEvent(QResizeEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  void onMouseMove(QMouseEvent* event);
  void onMousePress(QMouseEvent* event);
  void onMouseRelease(QMouseEvent* event);
  void onWheel(QWheelEvent* event);
  void applyRanges();
  void setWindow(double lo, double hi);  // in cell coordinates; clamped, emits zoomChanged
  QString labelTooltipAt(const QPoint& plot_pos) const;
  void showContextMenu(const QPoint& pos);
  void recolor();
  void updateTicks();
  void updateOverlays();
  void scheduleReplot();
  void drawCellTexts(QCPPainter* painter) const;

  QCustomPlot* plot_ = nullptr;
  CellsPlottable* map_ = nullptr;
  QCPColorScale* scale_ = nullptr;
  QCPTextElement* title_ = nullptr;
  QCPItemRect* row_highlight_ = nullptr;
  QCPItemRect* cell_highlight_ = nullptr;
  QCPItemRect* hover_highlight_ = nullptr;
  QCPItemRect* row_band_highlight_ = nullptr;
  QCPItemRect* col_band_highlight_ = nullptr;
  std::vector<QPointer<QObject>> band_lines_;
  QCPLayerable* cell_text_layer_ = nullptr;  // owned by the plot
  QStringList cell_texts_;

  bool color_scale_wanted_ = true;
  int rows_ = 0, cols_ = 0;
  std::shared_ptr<const HeatmapCells> cells_;
  ColorMap color_map_ = ColorMap::Sequential;
  RangeMode range_mode_ = RangeMode::Fixed;
  double fixed_lo_ = 0.0, fixed_hi_ = 1.0;
  QStringList row_labels_, col_labels_;
  bool col_labels_rotated_ = true;
  int row_band_ = 0, col_band_ = 0;
  QString row_band_prefix_, col_band_prefix_;
  int row_band_selected_ = -1, col_band_selected_ = -1;
  int highlighted_row_ = -1;
  int cell_row_ = -1, cell_col_ = -1;
  int hover_row_ = -1;
  bool selection_in_exports_ = false;
  bool exporting_ = false;  // the hover (and unless asked, the selection) gets no forced label
  // Zoom: the window [view_lo_, view_hi_] in cell coordinates (a cell c spans c +- 0.5).
  bool zoomable_ = false, zoomed_ = false;
  double view_lo_ = 0.0, view_hi_ = 0.0;
  // A left-button press: where, the window then, and whether it became a drag (a pan).
  QPoint press_pos_{-1, -1};
  double press_lo_ = 0.0;
  bool dragging_ = false;
  int shown_row_labels_ = 0, shown_col_labels_ = 0;
  struct LabelWidth {  // the widest label of an axis, as last measured
    QStringList labels;
    QString font;
    int px = 0;
  };
  LabelWidth row_labels_px_, col_labels_px_;
  QPoint last_hover_{-1, -1};
  std::function<QString(int, int, float)> tooltip_;
  FigureText figure_text_;
  QString file_stem_ = QStringLiteral("heatmap");
};

// A heatmap's cells, coloured and ready to draw: HeatmapView::prepareCells builds them on any
// thread (a worker builds a long prompt's attention pattern while the GUI thread stays free), and
// drawing them is one image blit.
struct HeatmapCells {
  int rows = 0, cols = 0;
  HeatmapRow row;  // reads the values where they are kept (a matrix, or the activation cache)
  // A sliding window (prepareCells): row r's cells before maskedBefore(r) are masked. 0: none.
  int window = 0;
  int maskedBefore(int r) const { return window > 0 && r >= window ? r - window + 1 : 0; }
  // How it was coloured: what was asked for, and the colour range that gave.
  ColorMap color_map = ColorMap::Sequential;
  HeatmapView::RangeMode range_mode = HeatmapView::RangeMode::Fixed;
  double fixed_lo = 0.0, fixed_hi = 1.0;
  double lo = 0.0, hi = 1.0;
  // Row 0 in the first scanline; a masked cell is transparent. A small map has several pixels per
  // cell (an integer factor), as QCustomPlot's own colour map does: Qt stretches tiny images unevenly.
  QImage image;

  float value(int r, int c) const;  // NaN when masked
};

}  // namespace hs::ui
