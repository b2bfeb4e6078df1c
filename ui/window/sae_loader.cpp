#include "ui/window/sae_loader.h"

#include <QtConcurrent/QtConcurrentRun>

#include <exception>
#include <utility>

#include "core/features/sae.h"
#include "core/model/model.h"
#include "core/model/thread_scope.h"
#include "ui/base/deliver.h"

namespace hs::ui {
namespace {

struct Outcome {
  std::vector<std::shared_ptr<const hs::Sae>> saes;
  QString error;
};

}  // namespace

SaeLoader::SaeLoader(QObject* parent) : QObject(parent) {}

SaeLoader::~SaeLoader() {
  for (QFuture<void>& f : in_flight_) f.waitForFinished();
}

void SaeLoader::load(const QString& dir, std::shared_ptr<const hs::Model> model) {
  auto work = QtConcurrent::run([dir, model]() -> Outcome {
    Outcome out;
    try {
      hs::SaeSet set = hs::load_sae_folder(dir.toStdString());
      if (set.saes.empty()) throw std::runtime_error("the folder holds no sparse autoencoder.");
      for (hs::Sae& sae : set.saes) {
        if (model) hs::check_sae_fits(sae, model->config());
        out.saes.push_back(std::make_shared<const hs::Sae>(std::move(sae)));
      }
    } catch (const std::exception& e) {
      out.saes.clear();
      out.error = QString::fromUtf8(e.what());
    }
    hs::release_thread_team();  // only the window's run thread keeps an OpenMP team
    return out;
  });
  std::erase_if(in_flight_, [](const QFuture<void>& f) { return f.isFinished(); });
  in_flight_.push_back(QFuture<void>(work));
  ++in_flight_count_;
  deliverLater(work, this, [this, dir, model](const Outcome& out) {
    --in_flight_count_;
    if (out.error.isEmpty()) Q_EMIT loaded(dir, out.saes, model);
    else Q_EMIT failed(dir, out.error);
  });
}

}  // namespace hs::ui
