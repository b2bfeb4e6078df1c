// Sparse autoencoders and transcoders in the window: File > Open Sparse Autoencoder (one folder
// at a time, as many as wanted, each read on a worker), File > Unload Sparse Autoencoder, the
// folders of `headscope --sae DIR`, and unloading those that no longer fit when the model changes.
#include "ui/window/main_window.h"

#include <QAction>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QtConcurrent/QtConcurrentRun>

#include "core/features/sae.h"
#include "core/model/model.h"
#include "ui/base/deliver.h"
#include "ui/controller/ablations.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/loaded_dashboards.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/sae_edits.h"
#include "ui/widgets/labels.h"
#include "ui/window/sae_loader.h"

namespace hs::ui {

void MainWindow::buildSaeMenu(QMenu* file) {
  sae_loader_ = new SaeLoader(this);
  connect(sae_loader_, &SaeLoader::loaded, this,
          [this](const QString& dir, std::vector<std::shared_ptr<const hs::Sae>> saes,
                 std::shared_ptr<const hs::Model> model) {
            if (model != controller_->model()) {
              // Checked against a model that has been replaced meanwhile: check again.
              loadSaeFolder(dir);
              return;
            }
            shipped_loading_.removeAll(dir);
            QStringList names;
            for (std::shared_ptr<const hs::Sae>& sae : saes) {
              const QString id = LoadedSaes::instance().add(dir, sae);
              names << LoadedSaes::instance().entry(id).value_or(LoadedSae{}).label;
            }
            statusBar()->showMessage(QStringLiteral("Loaded %1").arg(names.join(QStringLiteral("; "))), 8000);
            applyCommandLineSaeEdits();
            Q_EMIT saeLoaded(dir);
          });
  connect(sae_loader_, &SaeLoader::failed, this, [this](const QString& dir, const QString& message) {
    shipped_loading_.removeAll(dir);
    if (sae_error_box_) sae_error_box_->close();
    auto* box = new QMessageBox(QMessageBox::Warning, QStringLiteral("Could not load the sparse autoencoder"),
                                QStringLiteral("HeadScope could not load the sparse autoencoder folder\n%1")
                                    .arg(QDir::toNativeSeparators(dir)),
                                QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("saeLoadError"));
    box->setInformativeText(breakableText(message) +
                            QStringLiteral("\n\nA SAELens folder (cfg.json and sae_weights.safetensors), a "
                                           "circuit-tracer transcoder set (config.yaml) or a Gemma Scope params.npz "
                                           "made for this model's hooks will load."));
    box->setDetailedText(message);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setWindowModality(Qt::WindowModal);
    sae_error_box_ = box;
    box->open();
    applyCommandLineSaeEdits();
    Q_EMIT saeLoadFailed(dir, message);
  });

  file->addAction(QStringLiteral("Open Sparse &Autoencoder…"), this, &MainWindow::openSaeFolder)
      ->setObjectName(QStringLiteral("actionOpenSae"));
  file->addAction(QStringLiteral("Open Unit &Dashboards…"), this, &MainWindow::openDashboardFolder)
      ->setObjectName(QStringLiteral("actionOpenDashboards"));
  sae_menu_ = file->addMenu(QStringLiteral("&Unload Sparse Autoencoder"));
  sae_menu_->setObjectName(QStringLiteral("menuUnloadSae"));
  connect(&LoadedSaes::instance(), &LoadedSaes::changed, this, &MainWindow::updateSaeMenu);
  // Latent edits (the Features view): each change re-runs the prompt with the edited SAEs spliced in.
  connect(&SaeEdits::instance(), &SaeEdits::changed, this, &MainWindow::onAblationsChanged);
  // An unloaded SAE's edits go with it, said in the status bar: nothing stale is applied.
  connect(&LoadedSaes::instance(), &LoadedSaes::changed, this, [this] {
    const QString dropped = SaeEdits::instance().dropUnloaded();
    if (!dropped.isEmpty()) statusBar()->showMessage(dropped, 15000);
  });
  connect(&LoadedSaes::instance(), &LoadedSaes::loadShippedRequested, this, &MainWindow::loadShippedSaes);
  connect(&LoadedDashboards::instance(), &LoadedDashboards::buildRequested, this, &MainWindow::buildUnitDashboards);
  updateSaeMenu();
}

void MainWindow::updateSaeMenu() {
  sae_menu_->clear();
  const std::vector<LoadedSae> saes = LoadedSaes::instance().list();
  for (const LoadedSae& s : saes)
    sae_menu_->addAction(s.label, this, [id = s.id] { LoadedSaes::instance().remove(id); })
        ->setToolTip(QDir::toNativeSeparators(s.folder));
  if (saes.size() > 1) {
    sae_menu_->addSeparator();
    sae_menu_->addAction(QStringLiteral("Unload All"), this, [] { LoadedSaes::instance().clear(); });
  }
  sae_menu_->setEnabled(!saes.empty());
}

void MainWindow::openSaeFolder() {
  QSettings settings;
  const QString start = settings.value(QStringLiteral("saes/lastFolder"), QDir::homePath()).toString();
  const QString dir = QFileDialog::getExistingDirectory(
      this, QStringLiteral("Open Sparse Autoencoder: a SAELens folder (cfg.json, sae_weights.safetensors) or a "
                           "transcoder set (config.yaml)"),
      start);
  if (dir.isEmpty()) return;
  settings.setValue(QStringLiteral("saes/lastFolder"), QFileInfo(dir).absolutePath());
  loadSaeFolder(dir);
}

void MainWindow::openDashboardFolder() {
  QSettings settings;
  const QString start = settings.value(QStringLiteral("dashboards/lastFolder"), QDir::homePath()).toString();
  const QString dir = QFileDialog::getExistingDirectory(
      this, QStringLiteral("Open Unit Dashboards: the OUT.units folder headscope-cli scan --units wrote"), start);
  if (dir.isEmpty()) return;
  settings.setValue(QStringLiteral("dashboards/lastFolder"), QFileInfo(dir).absolutePath());
  loadDashboardFolder(dir);
}

void MainWindow::loadDashboardFolder(const QString& dir, std::function<void()> then) {
  statusBar()->showMessage(QStringLiteral("Opening the unit dashboards %1…").arg(QFileInfo(dir).fileName()));
  QFuture<std::pair<std::shared_ptr<const hs::UnitDashboardIndex>, QString>> read = QtConcurrent::run([dir] {
    using Out = std::pair<std::shared_ptr<const hs::UnitDashboardIndex>, QString>;
    try {
      return Out{std::make_shared<const hs::UnitDashboardIndex>(hs::read_unit_dashboard_index(dir.toStdString())),
                 QString()};
    } catch (const std::exception& e) {
      return Out{nullptr, QString::fromUtf8(e.what())};
    }
  });
  deliverLater(read, this, [this, dir, then](std::pair<std::shared_ptr<const hs::UnitDashboardIndex>, QString> got) {
    struct Then {
      std::function<void()> f;
      ~Then() {
        if (f) f();
      }
    } after{then};
    if (!got.first) {
      statusBar()->clearMessage();
      auto* box = new QMessageBox(QMessageBox::Warning, QStringLiteral("Unit dashboards not opened"),
                                  QStringLiteral("%1 could not be opened as unit dashboards: %2\n\nGive the "
                                                 "OUT.units folder that headscope-cli scan --units writes.")
                                      .arg(QDir::toNativeSeparators(dir), got.second),
                                  QMessageBox::Ok, this);
      box->setAttribute(Qt::WA_DeleteOnClose);
      box->setWindowModality(Qt::WindowModal);
      box->open();
      return;
    }
    const hs::UnitDashboardIndex& x = *got.first;
    const std::shared_ptr<const hs::Model>& model = controller_->model();
    const bool other_model = model && x.fingerprint() != model->fingerprint();
    LoadedDashboards::instance().add(got.first);
    statusBar()->showMessage(
        QStringLiteral("Opened %1 unit dashboards (%2, %3 positions) from %4%5")
            .arg(x.units)
            .arg(x.source.value("kind", std::string()) == "sae"
                     ? QStringLiteral("SAE %1").arg(QString::fromStdString(x.source.value("sae", std::string())))
                     : QStringLiteral("MLP neurons"))
            .arg(x.positions)
            .arg(QFileInfo(dir).fileName(),
                 other_model ? QStringLiteral(": they are of another model than %1, shown only when theirs is loaded.")
                                   .arg(QString::fromStdString(model->name()))
                             : QStringLiteral(".")),
        15000);
  });
}

void MainWindow::loadShippedSaes(const QString& model_dir) {
  QStringList loaded;
  for (const LoadedSae& s : LoadedSaes::instance().list()) loaded << QDir(s.folder).absolutePath();
  int started = 0;
  for (const QString& dir : shippedSaeFolders(model_dir)) {
    if (loaded.contains(dir) || shipped_loading_.contains(dir)) continue;
    shipped_loading_ << dir;
    loadSaeFolder(dir);
    ++started;
  }
  if (started == 0) statusBar()->showMessage(QStringLiteral("This model's sparse autoencoders are loaded or loading."), 4000);
}

void MainWindow::loadSaeFolder(const QString& dir) {
  if (!controller_->model()) {
    pending_sae_dirs_ << dir;  // checked against the model once it is in
    return;
  }
  statusBar()->showMessage(QStringLiteral("Loading the sparse autoencoder %1…").arg(QFileInfo(dir).fileName()));
  sae_loader_->load(dir, controller_->model());
}

void MainWindow::onModelChangedForSaes() {
  const std::shared_ptr<const hs::Model>& model = controller_->model();
  if (!model) return;
  QStringList unloaded;
  for (const LoadedSae& s : LoadedSaes::instance().list()) {
    try {
      hs::check_sae_fits(*s.sae, model->config());
    } catch (const std::exception& e) {
      LoadedSaes::instance().remove(s.id);
      unloaded << QStringLiteral("%1 (%2)").arg(s.label, QString::fromUtf8(e.what()));
    }
  }
  if (!unloaded.isEmpty())
    statusBar()->showMessage(QStringLiteral("Unloaded what does not fit %1: %2")
                                 .arg(QString::fromStdString(model->name()), unloaded.join(QStringLiteral("; "))),
                             15000);
  // Latent edits were made on the previous model's run (and its SAEs may be gone).
  const QString dropped = SaeEdits::instance().reset();
  if (!dropped.isEmpty()) statusBar()->showMessage(dropped, 15000);
  for (const QString& dir : std::exchange(pending_sae_dirs_, {})) loadSaeFolder(dir);
}

void MainWindow::applyCommandLineSaeEdits() {
  if (pending_sae_edits_.isEmpty() || --sae_loads_before_edits_ > 0) return;
  try {
    SaeEdits::instance().addFromSpec(std::exchange(pending_sae_edits_, {}));
  } catch (const std::exception& e) {
    showBanner(QStringLiteral("<b>--sae-edit was not applied:</b> %1").arg(QString::fromUtf8(e.what()).toHtmlEscaped()),
               true);
  }
}

hs::Interventions MainWindow::runInterventions() {
  hs::Interventions list = ablations_->list();
  if (!controller_->model() || SaeEdits::instance().isEmpty()) return list;
  QStringList refused;
  for (hs::Intervention& i : SaeEdits::instance().splices(*controller_->model()->weights(), &refused))
    list.push_back(std::move(i));
  if (!refused.isEmpty()) statusBar()->showMessage(refused.join(QStringLiteral("; ")), 15000);
  return list;
}

}  // namespace hs::ui
