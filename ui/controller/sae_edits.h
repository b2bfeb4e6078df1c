// The latent edits the person has made in the Features view (issue 25 item 3): zero a latent,
// scale it, or steer (add its decoder row times a strength), at every position or one, on any
// loaded SAE. While there are any, every run splices each edited SAE in at its hook with its
// error term (hs::splice_sae), so the run is the plain one except where a latent was edited, and
// every view shows the edited run (the window adds the splices to the head ablations).
//
// One list for the process, like LoadedSaes: an edit names its SAE by LoadedSaes id, and an SAE
// that is unloaded takes its edits with it (dropUnloaded says which). A new model drops them all.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>

#include <vector>

#include "core/features/features.h"
#include "core/model/intervention.h"

namespace hs { class Weights; }

namespace hs::ui {

struct SaeLatentEdit {
  QString sae_id;  // LoadedSaes id
  hs::LatentEdit edit;
  bool operator==(const SaeLatentEdit&) const = default;
};

class SaeEdits : public QObject {
  Q_OBJECT

 public:
  static SaeEdits& instance();

  // GUI thread.
  const std::vector<SaeLatentEdit>& list() const { return list_; }
  bool isEmpty() const { return list_.empty(); }
  // An edit of the same latent of the same SAE at the same position replaces the earlier one.
  void add(const QString& sae_id, const hs::LatentEdit& edit);
  void removeAt(int index);
  void clear();
  // `headscope --sae-edit SPEC`, headscope-cli run's syntax: items [N/]LATENT:zero|xS|+S[@POS]
  // separated by commas, N the N-th SAE loaded counting from 0 (default 0). Adds them all or,
  // throwing hs::Error naming the item, none.
  void addFromSpec(const QString& spec);
  // Drops the edits whose SAE is no longer loaded; returns a sentence naming them (empty: none).
  QString dropUnloaded();
  // Drops every edit (a new model); returns a sentence naming how many (empty: none).
  QString reset();

  // The interventions that splice every edited SAE into a run of `weights`, error term kept. An SAE
  // that does not fit (or an edit out of range) is never spliced: it is left out and `refused`
  // gets a sentence naming it and why.
  hs::Interventions splices(const hs::Weights& weights, QStringList* refused = nullptr) const;

  // "latent 12 zeroed", "latent 40 ×2.5 at pos 3", "latent 7 steered +3"; with the SAE's label
  // when `with_sae`.
  static QString describe(const SaeLatentEdit& edit, bool with_sae = true);

 Q_SIGNALS:
  void changed();

 private:
  SaeEdits() = default;
  void set(std::vector<SaeLatentEdit> list);
  std::vector<SaeLatentEdit> list_;
};

}  // namespace hs::ui
