// Every analysis view of the app, in tab order. The main window's tabs and View menu, the
// per-view export, File > Export All, headless --export and --help's list of views all iterate
// this list; adding a view is a core analysis, a view class and one line in registry.cpp.
#pragma once

#include <vector>

#include "ui/views/analysis_view.h"

namespace hs::ui {

const std::vector<ViewDescriptor>& viewRegistry();
// The descriptor with this id, or null.
const ViewDescriptor* findView(const QString& id);

}  // namespace hs::ui
