// Loading sparse autoencoders and transcoders off the GUI thread for the window (File > Open
// Sparse Autoencoder, `headscope --sae DIR`): the folder is read and checked against the model on
// a worker, and the answer comes back through the event loop. A folder whose SAEs do not fit the
// model is refused whole, with check_sae_fits's message.
#pragma once

#include <QFuture>
#include <QObject>
#include <QString>

#include <memory>
#include <vector>

namespace hs {
class Model;
struct Sae;
}

namespace hs::ui {

class SaeLoader : public QObject {
  Q_OBJECT

 public:
  explicit SaeLoader(QObject* parent = nullptr);
  ~SaeLoader() override;  // waits for the loads in flight

  // Reads `dir` and checks each SAE against `model`; answers with loaded or failed.
  void load(const QString& dir, std::shared_ptr<const hs::Model> model);
  int inFlight() const { return in_flight_count_; }

 Q_SIGNALS:
  void loaded(const QString& dir, std::vector<std::shared_ptr<const hs::Sae>> saes,
              std::shared_ptr<const hs::Model> model);
  void failed(const QString& dir, const QString& message);

 private:
  std::vector<QFuture<void>> in_flight_;
  int in_flight_count_ = 0;
};

}  // namespace hs::ui
