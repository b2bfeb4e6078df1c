#include "ui/window/shortcuts.h"

#include <QMessageBox>

namespace hs::ui {

std::vector<Shortcut> windowShortcuts(const QStringList& view_titles) {
  QStringList keys, titles;
  for (int i = 0; i < view_titles.size() && i < 9; ++i) {
    keys << QString::number(i + 1);
    titles << view_titles[i];
  }
  return {
      {QStringLiteral("Enter"), QStringLiteral("run the prompt now (it also runs as you type)")},
      {QStringLiteral("Shift+Enter"), QStringLiteral("new line in the prompt")},
      {QStringLiteral("Esc"), QStringLiteral("leave the prompt, so the arrow keys move the selection")},
      {QStringLiteral("← / →"), QStringLiteral("previous / next head")},
      {QStringLiteral("↑ / ↓, Page Up / Page Down"), QStringLiteral("previous / next layer")},
      {QStringLiteral("Shift+← / Shift+→"), QStringLiteral("previous / next position")},
      {QStringLiteral("Ctrl+") + keys.join(QStringLiteral(", ")), titles.join(QStringLiteral(", "))},
      {QStringLiteral("Wheel / drag / double-click"), QStringLiteral("zoom / pan / show all of the attention pattern")},
      {QStringLiteral("Ctrl+0"), QStringLiteral("attention pattern: reset the zoom (show every position)")},
      {QStringLiteral("Ctrl+O"), QStringLiteral("open a model folder")},
      {QStringLiteral("Ctrl+E"), QStringLiteral("export the current view (PNG, 2×)")},
      {QStringLiteral("Ctrl+Shift+E"), QStringLiteral("export every view")},
      {QStringLiteral("Ctrl+Q"), QStringLiteral("quit")},
  };
}

void showShortcutsDialog(QWidget* parent, const QStringList& view_titles) {
  QString html = QStringLiteral("<table cellpadding=3>");
  for (const Shortcut& s : windowShortcuts(view_titles))
    html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(s.keys, s.what);
  html += QStringLiteral("</table><p>Arrow keys move the selection when the prompt does not have the focus "
                         "(press Esc or click a view).</p>");
  QMessageBox::information(parent, QStringLiteral("Keyboard Shortcuts"), html);
}

}  // namespace hs::ui
