#include "ui/controller/sae_edits.h"

#include <algorithm>
#include <map>

#include "core/features/sae.h"
#include "core/error.h"
#include "ui/controller/loaded_saes.h"

namespace hs::ui {

SaeEdits& SaeEdits::instance() {
  static SaeEdits* edits = new SaeEdits;  // lives as long as the process, like LoadedSaes
  return *edits;
}

void SaeEdits::add(const QString& sae_id, const hs::LatentEdit& edit) {
  std::vector<SaeLatentEdit> after = list_;
  auto same = std::find_if(after.begin(), after.end(), [&](const SaeLatentEdit& e) {
    return e.sae_id == sae_id && e.edit.latent == edit.latent && e.edit.pos == edit.pos;
  });
  if (same != after.end()) same->edit = edit;
  else after.push_back({sae_id, edit});
  set(std::move(after));
}

void SaeEdits::addFromSpec(const QString& spec) {
  const std::vector<LoadedSae> saes = LoadedSaes::instance().list();
  std::vector<SaeLatentEdit> after = list_;
  for (QString item : spec.split(QLatin1Char(','))) {
    int which = 0;
    if (const qsizetype slash = item.indexOf(QLatin1Char('/')); slash >= 0) {
      bool ok = false;
      which = item.left(slash).trimmed().toInt(&ok);
      if (!ok || which < 0 || which >= static_cast<int>(saes.size()))
        throw hs::Error("--sae-edit: '" + item.toStdString() + "' names SAE " + item.left(slash).toStdString() + ", but " +
                        std::to_string(saes.size()) + " are loaded (counting from 0)");
      item = item.mid(slash + 1);
    }
    if (saes.empty()) throw hs::Error("--sae-edit needs an SAE loaded with --sae DIR");
    for (const hs::LatentEdit& e : hs::parse_latent_edits(item.toStdString()))
      after.push_back({saes[static_cast<size_t>(which)].id, e});
  }
  set(std::move(after));
}

void SaeEdits::removeAt(int index) {
  if (index < 0 || index >= static_cast<int>(list_.size())) return;
  std::vector<SaeLatentEdit> after = list_;
  after.erase(after.begin() + index);
  set(std::move(after));
}

void SaeEdits::clear() { set({}); }

QString SaeEdits::dropUnloaded() {
  QStringList gone;
  std::vector<SaeLatentEdit> after;
  for (const SaeLatentEdit& e : list_) {
    if (LoadedSaes::instance().find(e.sae_id)) after.push_back(e);
    else gone << describe(e, false);
  }
  if (gone.isEmpty()) return {};
  set(std::move(after));
  return QStringLiteral("Dropped the latent edit%1 of an unloaded SAE: %2")
      .arg(gone.size() == 1 ? "" : "s", gone.join(QStringLiteral(", ")));
}

QString SaeEdits::reset() {
  const size_t n = list_.size();
  if (n == 0) return {};
  set({});
  return QStringLiteral("Dropped %1 latent edit%2: they were made on another model.").arg(n).arg(n == 1 ? "" : "s");
}

hs::Interventions SaeEdits::splices(const hs::Weights& weights, QStringList* refused) const {
  // Per SAE, in the order first edited, so the runs of one list are always spliced the same way.
  std::vector<QString> order;
  std::map<QString, hs::SpliceOptions> options;
  for (const SaeLatentEdit& e : list_) {
    if (!options.count(e.sae_id)) order.push_back(e.sae_id);
    options[e.sae_id].edits.push_back(e.edit);
  }
  hs::Interventions out;
  for (const QString& id : order) {
    const std::optional<LoadedSae> entry = LoadedSaes::instance().entry(id);
    if (!entry) continue;  // unloaded: dropUnloaded removes its edits
    try {
      for (hs::Intervention& i : hs::splice_sae(entry->sae, weights, options[id])) out.push_back(std::move(i));
    } catch (const std::exception& err) {
      if (refused) *refused << QStringLiteral("%1 is not spliced: %2").arg(entry->label, QString::fromUtf8(err.what()));
    }
  }
  return out;
}

QString SaeEdits::describe(const SaeLatentEdit& e, bool with_sae) {
  QString text;
  switch (e.edit.kind) {
    case hs::LatentEdit::Kind::Zero: text = QStringLiteral("latent %1 zeroed").arg(e.edit.latent); break;
    case hs::LatentEdit::Kind::Scale: text = QStringLiteral("latent %1 ×%2").arg(e.edit.latent).arg(double{e.edit.value}); break;
    case hs::LatentEdit::Kind::Add:
      text = QStringLiteral("latent %1 steered %2%3").arg(e.edit.latent).arg(e.edit.value >= 0 ? "+" : "").arg(double{e.edit.value});
      break;
  }
  if (e.edit.pos >= 0) text += QStringLiteral(" at pos %1").arg(e.edit.pos);
  if (with_sae) {
    const std::optional<LoadedSae> entry = LoadedSaes::instance().entry(e.sae_id);
    text += QStringLiteral(" (%1)").arg(entry ? entry->label : e.sae_id);
  }
  return text;
}

void SaeEdits::set(std::vector<SaeLatentEdit> list) {
  if (list == list_) return;
  list_ = std::move(list);
  Q_EMIT changed();
}

}  // namespace hs::ui
