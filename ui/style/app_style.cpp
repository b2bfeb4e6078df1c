#include "ui/style/app_style.h"

#include <QApplication>
#include <QIcon>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

// The icon lives in a resource compiled into the static headscope_ui library; a static library's
// resources must be registered by name or the linker drops them.
static void initResources() { Q_INIT_RESOURCE(headscope); }

namespace hs::ui {

void applyAppStyle(QApplication& app) {
  initResources();
  app.setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QPalette p = app.style()->standardPalette();
  p.setColor(QPalette::Window, QColor(0xf5, 0xf6, 0xf8));
  p.setColor(QPalette::Base, Qt::white);
  p.setColor(QPalette::AlternateBase, QColor(0xf4, 0xf6, 0xf9));
  p.setColor(QPalette::Highlight, QColor(0x22, 0x5e, 0xa8));
  p.setColor(QPalette::Button, QColor(0xf0, 0xf1, 0xf4));
  app.setPalette(p);
  app.setWindowIcon(QIcon(QStringLiteral(":/headscope/headscope.svg")));
  app.setStyleSheet(QStringLiteral(R"(
    QLabel#viewTitle { font-size: 12pt; color: #1a1a1a; }
    QLabel#sectionCaption { color: #444; }
    QLabel#plotCaption { color: #444; font-size: 9pt; }
    QLabel#panelTitle { font-weight: 600; font-size: 10.5pt; color: #1a1a1a; padding: 2px; }
    QLabel#operatorLabel { font-size: 15pt; color: #555; padding: 0 4px; }
    QLabel#headsTitle { font-weight: 600; font-size: 10.5pt; }
    QLabel#banner[kind="error"] { background: #fdecea; color: #8a1c13; border: 1px solid #f5c2bd;
                                   border-radius: 4px; padding: 6px 10px; }
    QLabel#banner[kind="warning"] { background: #fff4e0; color: #6b4500; border: 1px solid #f3d7a6;
                                     border-radius: 4px; padding: 6px 10px; }
    QFrame#concatPanel, QFrame#sumPanel { background: white; border: 1px solid #d6dbe1; border-radius: 4px; }
    QFrame#headsPanel { background: white; border: 1px solid #d6dbe1; border-radius: 4px; }
    QTabWidget::pane { border: 1px solid #d6dbe1; background: white; border-radius: 4px; top: -1px; }
    QTabBar::tab { padding: 6px 16px; }
    QStatusBar QLabel { padding: 0 6px; }
  )"));
}

}  // namespace hs::ui
