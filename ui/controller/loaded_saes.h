// The sparse autoencoders and transcoders the window has loaded (File > Open Sparse Autoencoder,
// `headscope --sae DIR`), one entry per SAE (a transcoder set's folder gives one per layer).
//
// One list for the process: the Features view's analysis runs on a worker and finds its SAE here
// by id, and Export All's own instances of the view read the same list. Ids are never reused, so
// a result computed for an SAE that was unloaded, or unloaded and loaded again, names an id that
// is gone and is never shown as another SAE's.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hs { struct Sae; }

namespace hs::ui {

struct LoadedSae {
  QString id;      // "sae1": unique for the process
  QString folder;  // where it was loaded from
  QString label;   // for pickers and titles: the SAE's name, and its layer in a set
  std::shared_ptr<const hs::Sae> sae;
};

// The SAE folders a model folder carries in its `saes/` (the built-in model's SAE and
// transcoders): each subfolder with a SAELens cfg.json, a circuit-tracer config.yaml or a Gemma
// Scope params.npz, sorted by name. Empty when there is no such folder.
QStringList shippedSaeFolders(const QString& model_dir);

class LoadedSaes : public QObject {
  Q_OBJECT

 public:
  static LoadedSaes& instance();

  // Any thread.
  std::vector<LoadedSae> list() const;
  std::shared_ptr<const hs::Sae> find(const QString& id) const;
  std::optional<LoadedSae> entry(const QString& id) const;
  bool empty() const;

  // GUI thread: each emits changed().
  QString add(const QString& folder, std::shared_ptr<const hs::Sae> sae);
  void remove(const QString& id);
  void clear();

  // A view asks the window to load the SAE folders a model folder carries (its `saes/`, as the
  // built-in model's); the window loads those not loaded yet. GUI thread.
  void requestLoadShipped(const QString& model_dir) { Q_EMIT loadShippedRequested(model_dir); }

 Q_SIGNALS:
  void changed();
  void loadShippedRequested(const QString& model_dir);

 private:
  LoadedSaes() = default;
  mutable std::mutex mutex_;
  std::vector<LoadedSae> saes_;
  int next_id_ = 1;
};

}  // namespace hs::ui
