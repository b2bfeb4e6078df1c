// Help > Keyboard Shortcuts: every key the window answers, in one table. The menus bind the keys
// (main_window_menus.cpp); this is the list a person reads, in the same order.
#pragma once

#include <QString>
#include <QStringList>

#include <vector>

class QWidget;

namespace hs::ui {

struct Shortcut {
  QString keys;  // "Ctrl+Shift+E"
  QString what;  // "export every view"
};

// The table for a window whose tabs are `view_titles` (Ctrl+1 .. Ctrl+9 show the first nine).
std::vector<Shortcut> windowShortcuts(const QStringList& view_titles);
// The table in a message box.
void showShortcutsDialog(QWidget* parent, const QStringList& view_titles);

}  // namespace hs::ui
