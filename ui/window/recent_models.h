// The model folders opened lately, newest first (at most kMaxRecentModels), kept in QSettings
// ("models/recent") for File > Open Recent and the model list above the prompt.
#pragma once

#include <QString>
#include <QStringList>

namespace hs::ui {

inline constexpr int kMaxRecentModels = 8;

QStringList recentModels();
// Puts `dir` (as an absolute path) first, dropping an earlier entry of it and the oldest beyond
// the limit.
void rememberRecentModel(const QString& dir);
void clearRecentModels();

}  // namespace hs::ui
