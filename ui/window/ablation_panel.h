// The Ablation dock: the heads ablated in every run (each with a button that removes it), and
// what the ablation did to the run on screen, compared with the plain run of the same prompt: the
// top 10 next tokens before and after, the change in the target token's logit, and the KL
// divergence of the next-token distributions at every position.
#pragma once

#include <QWidget>

#include <memory>
#include <optional>

#include "ui/controller/results.h"

class QLabel;
class QPushButton;
class QTableWidget;
class QVBoxLayout;

namespace hs::ui {

class Ablations;
class BarChartView;
class Selection;

class AblationPanel : public QWidget {
  Q_OBJECT

 public:
  AblationPanel(Ablations* ablations, Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult> run);

  QTableWidget* topTable() const { return top_; }
  BarChartView* klBars() const { return kl_; }
  QString targetText() const;
  // The remove button of head (layer, head)'s row, or null.
  QPushButton* removeButton(int layer, int head) const;

 private:
  void rebuildList();
  void refreshComparison();

  Ablations* ablations_;
  Selection* selection_;
  std::shared_ptr<const RunResult> run_;
  QVBoxLayout* list_ = nullptr;
  QLabel* empty_ = nullptr;
  QPushButton* clear_ = nullptr;
  QLabel* caption_ = nullptr;
  QTableWidget* top_ = nullptr;
  QLabel* target_ = nullptr;
  QLabel* kl_caption_ = nullptr;
  BarChartView* kl_ = nullptr;
};

}  // namespace hs::ui
