#include "ui/window/headless.h"

#include <QEventLoop>

#include <cstdio>

#include "core/error.h"
#include "core/features/sae.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/sae_edits.h"
#include "ui/window/export_all.h"

namespace hs::ui {

int runHeadlessExport(const HeadlessExportOptions& options) {
  auto complain = [](const QString& message) {
    std::fprintf(stderr, "headscope: %s\n", qPrintable(QString(message).replace('\n', ' ')));
    return 1;
  };
  if (options.out_dir.isEmpty()) return complain(QStringLiteral("--export needs an output folder."));
  if (options.text.isEmpty()) return complain(QStringLiteral("--export needs a prompt: add --text \"...\"."));
  const int layer = options.layer, head = options.head;
  std::shared_ptr<const RunResult> run;
  try {
    const std::filesystem::path dir =
        options.model_dir.isEmpty() ? hs::builtin_model_dir() : std::filesystem::path(options.model_dir.toStdString());
    auto model = hs::Model::load(dir);
    if (layer >= model->config().n_layers || head >= model->config().n_heads || layer < 0 || head < 0)
      return complain(QStringLiteral("--head %1.%2: the model has %3 layers of %4 heads (both count from 0).")
                          .arg(layer)
                          .arg(head)
                          .arg(model->config().n_layers)
                          .arg(model->config().n_heads));
    // The SAEs first: a folder that cannot be read, or does not fit the model, stops the export
    // with its message rather than leaving the features view out.
    for (const QString& sae_dir : options.sae_dirs) {
      hs::SaeSet set = hs::load_sae_folder(sae_dir.toStdString());
      for (hs::Sae& sae : set.saes) {
        hs::check_sae_fits(sae, model->config());
        LoadedSaes::instance().add(sae_dir, std::make_shared<const hs::Sae>(std::move(sae)));
      }
    }
    // Latent edits: the edited SAEs spliced in (error term kept) after the head ablations, as the window does.
    hs::Interventions interventions = options.ablations;
    if (!options.sae_edits.isEmpty()) {
      SaeEdits::instance().addFromSpec(options.sae_edits);
      QStringList refused;
      for (hs::Intervention& i : SaeEdits::instance().splices(*model->weights(), &refused)) interventions.push_back(std::move(i));
      if (!refused.isEmpty()) return complain(refused.join(QStringLiteral("; ")));
    }
    run = AnalysisController::computeRun(model, options.text, nullptr, interventions, nullptr, nullptr,
                                         options.keep_last ? hs::OverlongPolicy::KeepLastWithWarning
                                                           : hs::OverlongPolicy::TruncateWithWarning);
  } catch (const std::exception& e) {
    return complain(QString::fromStdString(e.what()));
  }
  for (const std::string& warning : run->run.warnings)
    std::fprintf(stderr, "headscope: warning: %s\n", warning.c_str());

  ExportAllJob::Options export_options;
  export_options.out_dir = options.out_dir;
  export_options.scale = options.scale;
  export_options.layer = layer;
  export_options.head = head;
  export_options.view_inputs = options.view_inputs;
  ExportAllJob job(run, export_options);
  bool ok = false, done = false;
  QString message;
  QEventLoop loop;
  QObject::connect(&job, &ExportAllJob::finished, &loop, [&](bool success, const QString& text) {
    ok = success;
    message = text;
    done = true;
    loop.quit();
  });
  job.start();  // may finish at once (an unwritable folder)
  if (!done) loop.exec();
  if (!ok) return complain(message);
  std::printf("%s\n", qPrintable(message));
  return 0;
}

}  // namespace hs::ui
