#include "ui/views/analysis_view.h"

#include <QContextMenuEvent>
#include <QMenu>

#include "ui/controller/selection.h"

namespace hs::ui {

AnalysisView::AnalysisView(Selection* selection, QWidget* parent) : QWidget(parent), selection_(selection) {}

void AnalysisView::setResult(std::shared_ptr<const ViewResult>) {}

void AnalysisView::showProgress(double, const QString&) {}

void AnalysisView::showFailure(const QString&) {}

void AnalysisView::paintFigure(QPainter& painter, QSize) { renderWidgetInto(this, painter); }

void AnalysisView::contextMenuEvent(QContextMenuEvent* event) {
  QMenu menu(this);
  menu.addSection(QStringLiteral("The whole view"));
  addFigureExportActions(menu, this, *this);
  menu.exec(event->globalPos());
}

std::optional<QVariant> parseViewOption(const ViewOption& option, const QString& text, QString* error) {
  bool ok = true;
  QVariant value;
  switch (option.type) {
    case ViewOption::Type::Text:
      if (option.choices.isEmpty() || option.choices.contains(text)) return QVariant(text);
      *error = QStringLiteral("--%1 must be one of %2 (got '%3')").arg(option.name, option.choices.join(QLatin1Char('|')), text);
      return std::nullopt;
    case ViewOption::Type::Integer: value = text.toInt(&ok); break;
    case ViewOption::Type::Number: value = text.toDouble(&ok); break;
  }
  if (ok) return value;
  *error = QStringLiteral("--%1 must be %2 (got '%3')")
               .arg(option.name, option.type == ViewOption::Type::Integer ? QStringLiteral("an integer")
                                                                          : QStringLiteral("a number"),
                    text);
  return std::nullopt;
}

AnalysisKey keyFromSelection(const Selection& selection, unsigned reads) {
  AnalysisKey key;
  if (reads & kReadsLayer) key.layer = selection.layer();
  if (reads & kReadsHead) key.head = selection.head();
  if (reads & kReadsPosition) key.pos = selection.position();
  if (reads & kReadsTarget) key.target = selection.target();
  return key;
}

}  // namespace hs::ui
