// The Features view's edits and reconstruction quality (issue 25 item 3), below its latent
// table: for the latent shown, zero it, scale it or steer with its decoder row, at every position
// or the selected one (SaeEdits; the window re-runs the prompt with the SAEs spliced in); the
// list of edits, each removable; and the shown SAE's reconstruction on this prompt
// (hs::sae_quality: MSE, explained variance, L0, the loss clean and with the SAE in place of the
// activation without error term), computed on a worker and shown only for the prompt it was
// computed on.
#pragma once

#include <QFuture>
#include <QWidget>

#include <atomic>
#include <memory>
#include <vector>

#include "core/features/features.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QListWidget;
class QPushButton;

namespace hs { class ActivationCache; }

namespace hs::ui {

class Selection;
struct UnitsResult;

class SaeEditPanel : public QWidget {
  Q_OBJECT

 public:
  explicit SaeEditPanel(Selection* selection, QWidget* parent = nullptr);
  ~SaeEditPanel() override;

  // The Features view's result: its SAE, its shown latent and the plain run it read.
  void setResult(std::shared_ptr<const UnitsResult> result);

  // The edit the controls describe for the shown latent (for tests; the Apply button adds it).
  hs::LatentEdit pendingEdit() const;
  void applyEdit();
  // The quality on screen, and the run and SAE it is of (null: none yet).
  const std::shared_ptr<const hs::SaeQuality>& quality() const { return quality_; }
  QString qualityText() const;

  QComboBox* kindBox() const { return kind_; }
  QDoubleSpinBox* valueBox() const { return value_; }
  QCheckBox* atPositionBox() const { return at_pos_; }
  QListWidget* editList() const { return list_; }

 Q_SIGNALS:
  void qualityReady();

 private:
  void refreshList();
  void refreshControls();
  void requestQuality();

  Selection* selection_;
  std::shared_ptr<const UnitsResult> result_;
  QComboBox* kind_ = nullptr;
  QDoubleSpinBox* value_ = nullptr;
  QCheckBox* at_pos_ = nullptr;
  QPushButton* apply_ = nullptr;
  QListWidget* list_ = nullptr;
  QPushButton* remove_ = nullptr;
  QPushButton* clear_ = nullptr;
  QLabel* quality_label_ = nullptr;
  // The quality shown and what it is of: the plain run and the SAE.
  std::shared_ptr<const hs::SaeQuality> quality_;
  std::shared_ptr<const hs::ActivationCache> quality_run_;
  std::shared_ptr<const hs::Sae> quality_sae_;
  quint64 quality_job_ = 0;
  // The newest job, shared with the worker: a queued job of an earlier prompt skips its work.
  std::shared_ptr<std::atomic<quint64>> quality_latest_ = std::make_shared<std::atomic<quint64>>(0);
  std::vector<QFuture<void>> in_flight_;
};

}  // namespace hs::ui
