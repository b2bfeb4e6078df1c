// The Neurons and Features views (issue 25 item 4) on the built-in model: their tables list the
// units the core's activations and gradients rank first, a chosen unit's token strip holds its
// activations, its logit effects are its output direction through W_U computed directly, an SAE
// that does not fit the model is refused with a message, and the window keeps running as one types.
#include <catch2/catch.hpp>

#include <QDir>
#include <QFile>
#include <QLabel>
#include <QMessageBox>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "core/analysis/attribution_data.h"
#include "core/analysis/scan.h"
#include "core/analysis/unit_dataset.h"
#include "core/analysis/units.h"
#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/io/unit_dashboards.h"
#include "core/model/backward.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/controller/loaded_dashboards.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/selection.h"
#include "ui/views/units_view.h"
#include "ui/widgets/activation_strip.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/shaded_token_rows.h"
#include "ui/widgets/unit_dashboard.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::builtinModelDir;
using hs::ui::test::ClearSaes;
using hs::ui::test::waitFor;

namespace {

const QString kPrompt = QStringLiteral("The cat sat on the mat. The cat sat on the");
constexpr int kLayer = 2;

std::shared_ptr<const hs::Model> builtinModel() {
  static std::shared_ptr<const hs::Model> model = hs::Model::load(hs::builtin_model_dir());
  return model;
}

std::shared_ptr<const RunResult> builtinRun(const QString& text = kPrompt) {
  auto run = AnalysisController::computeRun(builtinModel(), text);
  run->job = 1;
  return run;
}

// The units of `row` by value (or |value|), largest first, lower index first on ties: the slow way.
std::vector<int> sortedUnits(const hs::RowVectorXf& row, size_t k, bool magnitude) {
  std::vector<int> units(static_cast<size_t>(row.size()));
  std::iota(units.begin(), units.end(), 0);
  auto key = [&](int i) { return magnitude ? std::abs(row(i)) : row(i); };
  std::stable_sort(units.begin(), units.end(), [&](int a, int b) { return key(a) > key(b); });
  units.resize(std::min(k, units.size()));
  return units;
}

// A direction's logit effects, each an explicit dot product in double with the token's W_U row.
std::vector<double> directEffects(const hs::Weights& w, const hs::RowVectorXf& direction) {
  const hs::ModelConfig& c = w.config();
  std::vector<double> out(static_cast<size_t>(c.d_vocab));
  std::vector<float> u(static_cast<size_t>(c.d_model));
  for (int t = 0; t < c.d_vocab; ++t) {
    w.unembed_row(t, u.data());
    double sum = 0;
    for (int d = 0; d < c.d_model; ++d) sum += double{direction(d)} * u[static_cast<size_t>(d)];
    out[static_cast<size_t>(t)] = sum;
  }
  return out;
}

void checkEffects(const hs::LogitEffects& effects, const std::vector<double>& direct) {
  std::vector<int> order(direct.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return direct[size_t(a)] > direct[size_t(b)]; });
  const double scale = std::max(std::abs(direct[size_t(order.front())]), std::abs(direct[size_t(order.back())]));
  REQUIRE(effects.top.size() == size_t(UnitsView::kTopTokens));
  REQUIRE(effects.bottom.size() == size_t(UnitsView::kTopTokens));
  for (size_t i = 0; i < effects.top.size(); ++i) {
    // float32 products against double sums: 1e-5 of the largest effect (ids compared where the
    // values are further apart than that)
    CHECK(std::abs(effects.top[i].value - direct[size_t(order[i])]) < 1e-5 * scale);
    CHECK(std::abs(effects.top[i].value - direct[size_t(effects.top[i].token)]) < 1e-5 * scale);
    const int low = order[order.size() - 1 - i];
    CHECK(std::abs(effects.bottom[i].value - direct[size_t(low)]) < 1e-5 * scale);
    CHECK(std::abs(effects.bottom[i].value - direct[size_t(effects.bottom[i].token)]) < 1e-5 * scale);
  }
}

// A small standard SAE in SAELens's v6 layout at `hook`, seeded random weights of width d_in.
void writeSaeFolder(const QString& dir, int d_in, int d_sae, const std::string& hook, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto values = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng) * scale;
    return v;
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  const float enc = 1.0f / std::sqrt(static_cast<float>(d_in));
  std::vector<Tensor> tensors = {
      {"W_dec", {d_sae, d_in}, values(size_t(d_sae) * d_in, 0.1f)},
      {"W_enc", {d_in, d_sae}, values(size_t(d_in) * d_sae, enc)},
      {"b_dec", {d_in}, values(size_t(d_in), 0.01f)},
      {"b_enc", {d_sae}, values(size_t(d_sae), 0.1f)},
  };
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const Tensor& t : tensors) {
    const size_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + bytes}}};
    data.append(reinterpret_cast<const char*>(t.data.data()), bytes);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = static_cast<char>((uint64_t{h.size()} >> (8 * i)) & 0xff);
  file += h + data;
  QDir().mkpath(dir);
  QFile weights(QDir(dir).filePath(QStringLiteral("sae_weights.safetensors")));
  REQUIRE(weights.open(QIODevice::WriteOnly));
  weights.write(file.data(), static_cast<qint64>(file.size()));
  const nlohmann::json cfg = {{"architecture", "standard"},
                              {"d_in", d_in},
                              {"d_sae", d_sae},
                              {"dtype", "float32"},
                              {"device", "cpu"},
                              {"apply_b_dec_to_input", true},
                              {"normalize_activations", "none"},
                              {"reshape_activations", "none"},
                              {"metadata", {{"sae_lens_version", "6.5.1"}, {"hook_name", hook}}}};
  QFile config(QDir(dir).filePath(QStringLiteral("cfg.json")));
  REQUIRE(config.open(QIODevice::WriteOnly));
  config.write(QByteArray::fromStdString(cfg.dump(2)));
}

std::shared_ptr<const UnitsResult> computeFor(UnitKind kind, std::shared_ptr<const RunResult> run, const AnalysisKey& key) {
  const ViewDescriptor d = kind == UnitKind::Neuron ? UnitsView::neuronsDescriptor() : UnitsView::featuresDescriptor();
  return std::dynamic_pointer_cast<const UnitsResult>(AnalysisController::computeAnalysis(d.analysis, std::move(run), key));
}

std::vector<int> tableUnits(const QTableWidget* table) {
  std::vector<int> units;
  for (int r = 0; r < table->rowCount(); ++r) units.push_back(table->item(r, 0)->data(Qt::UserRole).toInt());
  return units;
}

}  // namespace

TEST_CASE("Neurons view: the top neurons at a position and their attributions are the core's", "[units]") {
  const auto run = builtinRun();
  const hs::ActivationCache& cache = *run->run.cache;
  const int pos = run->n_pos() - 1;
  Selection selection;
  selection.setBounds(run->n_layer(), run->n_head(), run->n_pos());
  selection.setLayer(kLayer);
  selection.setPosition(pos);
  UnitsView view(UnitKind::Neuron, &selection);
  view.resize(1300, 820);
  view.show();
  view.setRun(run);
  const AnalysisKey key = view.analysisKey(keyFromSelection(selection, UnitsView::neuronsDescriptor().analysis.reads));
  const auto result = computeFor(UnitKind::Neuron, run, key);
  REQUIRE(result);
  REQUIRE(result->base);
  const UnitsBase& b = *result->base;

  const hs::RowMatrixXf post = cache.mlp_post(kLayer);  // [pos, d_mlp]
  CHECK(b.acts.dense() == post);
  CHECK(b.by_activation == sortedUnits(post.row(pos), UnitsView::kTopUnits, false));
  // Attribution: post * dM/dpost at the position, M the predicted token's logit there.
  const hs::TargetMetric target = hs::target_metric(cache, pos, std::nullopt, std::nullopt);
  hs::GradOptions options;
  options.keep = {hs::HookPoint::MlpPost};
  const hs::GradientCache grad = hs::backward(cache, target.metric, options);
  const hs::RowVectorXf attr = post.row(pos).cwiseProduct(grad.rows(hs::HookPoint::MlpPost, kLayer).row(pos));
  // Neurons: the attributions come with the activations.
  REQUIRE(b.attribution());
  CHECK((b.attribution()->attribution - attr).cwiseAbs().maxCoeff() <= 1e-6f * attr.cwiseAbs().maxCoeff());
  CHECK(b.attribution()->by_attribution == sortedUnits(attr, UnitsView::kTopUnits, true));
  CHECK(attr.cwiseAbs().maxCoeff() > 0);

  view.setResult(result);
  QTableWidget* table = view.unitTable();
  CHECK(tableUnits(table) == b.by_activation);
  CHECK(table->item(0, 1)->text() == formatNumber(post(pos, b.by_activation.front())));
  view.setSortByAttribution(true);
  CHECK(tableUnits(table) == b.attribution()->by_attribution);
  // The CSV is the table as listed.
  const QStringList csv = view.tableCsv().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  REQUIRE(csv.size() == UnitsView::kTopUnits + 1);
  CHECK(csv[0] == QStringLiteral("neuron,activation,attribution"));
  CHECK(csv[1].section(QLatin1Char(','), 0, 0).toInt() == b.attribution()->by_attribution.front());
  CHECK(std::abs(csv[1].section(QLatin1Char(','), 2, 2).toDouble() - attr(b.attribution()->by_attribution.front())) < 1e-6);
  // Without a choice the top neuron by activation is shown, with no dashboard yet.
  CHECK(result->unit == b.by_activation.front());
  CHECK_FALSE(result->unit_chosen);
  // The built-in model carries held-out passages: the box offers to build every layer's neuron dashboards.
  CHECK(view.dashboardLabel()->text().contains(QStringLiteral("<a href=\"build\">build every layer's neuron dashboards</a>")));
}

TEST_CASE("Neurons view: a chosen neuron's strip holds its activations and its logit effects are W_out's row through W_U",
          "[units]") {
  const auto run = builtinRun();
  const hs::ActivationCache& cache = *run->run.cache;
  Selection selection;
  selection.setBounds(run->n_layer(), run->n_head(), run->n_pos());
  selection.setLayer(kLayer);
  selection.setPosition(4);
  UnitsView view(UnitKind::Neuron, &selection);
  view.resize(1300, 820);
  view.show();
  view.setRun(run);
  const auto& reads = UnitsView::neuronsDescriptor().analysis.reads;
  view.setResult(computeFor(UnitKind::Neuron, run, view.analysisKey(keyFromSelection(selection, reads))));
  const int neuron = 117;
  QSignalSpy asked(&view, &AnalysisView::analysisKeyChanged);
  view.chooseUnit(neuron);
  CHECK(asked.count() == 1);
  // The strip follows at once, from the activations at hand.
  const hs::RowMatrixXf post = cache.mlp_post(kLayer);
  const std::vector<float>& values = view.strip()->values();
  REQUIRE(values.size() == size_t(run->n_pos()));
  for (int p = 0; p < run->n_pos(); ++p) CHECK(values[size_t(p)] == post(p, neuron));
  CHECK(view.strip()->outlined() == 4);
  // The key now names the neuron; its result carries the neuron's logit effects.
  const AnalysisKey key = view.analysisKey(keyFromSelection(selection, reads));
  CHECK(key.params == QStringList{QStringLiteral("117")});
  const auto result = computeFor(UnitKind::Neuron, run, key);
  REQUIRE(result->unit == neuron);
  CHECK(result->unit_chosen);
  const hs::Weights& w = *cache.weights();
  checkEffects(result->effects, directEffects(w, w.W_out(kLayer).row(neuron)));
  view.setResult(result);
  REQUIRE(view.topTokens()->rowCount() == UnitsView::kTopTokens);
  CHECK(view.topTokens()->item(0, 1)->text() == formatSigned(result->effects.top.front().value));
  CHECK(view.bottomTokens()->item(0, 1)->text() == formatSigned(result->effects.bottom.front().value));
  // Another layer starts again at its top neuron.
  selection.setLayer(kLayer + 1);
  CHECK(view.chosenUnit() == -1);
}

TEST_CASE("Features view: a small SAE's top latents are run_sae's and its logit effects the decoder row through W_U",
          "[units]") {
  ClearSaes clear;
  QTemporaryDir tmp;
  const QString dir = tmp.filePath(QStringLiteral("sae"));
  const auto model = builtinModel();
  writeSaeFolder(dir, model->config().d_model, 64, "blocks.2.hook_resid_pre", 25);
  hs::SaeSet set = hs::load_sae_folder(dir.toStdString());
  REQUIRE(set.saes.size() == 1);
  const auto sae = std::make_shared<const hs::Sae>(std::move(set.saes.front()));
  const auto run = builtinRun();
  const hs::ActivationCache& cache = *run->run.cache;
  const int pos = run->n_pos() - 1;
  Selection selection;
  selection.setBounds(run->n_layer(), run->n_head(), run->n_pos());
  selection.setPosition(pos);
  UnitsView view(UnitKind::Latent, &selection);
  view.resize(1300, 820);
  view.show();
  view.setRun(run);
  const auto& reads = UnitsView::featuresDescriptor().analysis.reads;
  CHECK(view.saeId().isEmpty());
  CHECK(view.exportFigures(*run).empty());
  CHECK(!view.exportSkipReason(*run).isEmpty());
  // Without an SAE the analysis says so, it does not fail.
  const auto none = computeFor(UnitKind::Latent, run, view.analysisKey(keyFromSelection(selection, reads)));
  CHECK(!none->base);
  CHECK(!none->message.isEmpty());

  const QString id = LoadedSaes::instance().add(dir, sae);
  CHECK(view.saeId() == id);  // the view takes the SAE loaded
  const auto result = computeFor(UnitKind::Latent, run, view.analysisKey(keyFromSelection(selection, reads)));
  REQUIRE(result->base);
  const hs::SaeRun direct = hs::run_sae(cache, *sae);
  CHECK(result->base->acts.dense() == direct.feature_acts);
  CHECK(result->base->by_activation == sortedUnits(direct.feature_acts.row(pos), UnitsView::kTopUnits, false));
  CHECK(direct.feature_acts.row(pos).maxCoeff() > 0);
  // Attribution: activation x gradient at the SAE's output hook through the decoder.
  const hs::TargetMetric target = hs::target_metric(cache, pos, std::nullopt, std::nullopt);
  hs::GradOptions options;
  options.keep = {hs::HookPoint::ResidPre};
  const hs::GradientCache grad = hs::backward(cache, target.metric, options);
  const hs::RowMatrixXf attr = hs::latent_attribution(*sae, direct, grad.rows(hs::HookPoint::ResidPre, 2));
  // The activations come first: the attributions are the view's second stage.
  CHECK(!result->base->attribution());
  view.setResult(result);
  CHECK(tableUnits(view.unitTable()) == result->base->by_activation);
  QTRY_VERIFY(!view.attributionPending());
  REQUIRE(result->base->attribution());
  CHECK((result->base->attribution()->attribution - attr.row(pos)).cwiseAbs().maxCoeff() <=
        1e-5f * attr.row(pos).cwiseAbs().maxCoeff());
  const int latent = result->unit;
  REQUIRE(latent == result->base->by_activation.front());
  checkEffects(result->effects, directEffects(*cache.weights(), hs::sae_decoder_row(*sae, latent)));
  const std::vector<float>& values = view.strip()->values();
  for (int p = 0; p < run->n_pos(); ++p) CHECK(values[size_t(p)] == direct.feature_acts(p, latent));
  CHECK(view.exportFigures(*run).size() == 2);

  // Unloaded: the result of that SAE is no longer shown, and the view is empty again.
  LoadedSaes::instance().remove(id);
  CHECK(view.saeId().isEmpty());
  AnalysisKey gone_key;
  gone_key.pos = pos;
  gone_key.params = {id, QStringLiteral("-1")};
  const auto gone = computeFor(UnitKind::Latent, run, gone_key);
  CHECK(!gone->base);
}

TEST_CASE("Features view: the activations are shown before the attributions, which are the shown run's and position's",
          "[units]") {
  ClearSaes clear;
  QTemporaryDir tmp;
  const QString dir = tmp.filePath(QStringLiteral("sae"));
  const auto model = builtinModel();
  writeSaeFolder(dir, model->config().d_model, 64, "blocks.2.hook_resid_pre", 27);
  hs::SaeSet set = hs::load_sae_folder(dir.toStdString());
  const auto sae = std::make_shared<const hs::Sae>(std::move(set.saes.front()));
  const QString id = LoadedSaes::instance().add(dir, sae);
  const auto run = builtinRun();
  const hs::ActivationCache& cache = *run->run.cache;
  Selection selection;
  selection.setBounds(run->n_layer(), run->n_head(), run->n_pos());
  UnitsView view(UnitKind::Latent, &selection);
  view.resize(1300, 820);
  view.show();
  view.setRun(run);
  auto key_at = [&](int pos) {
    AnalysisKey key;
    key.pos = pos;
    key.params = {id, QStringLiteral("-1")};
    return key;
  };
  auto reference = [&](int pos) {
    const hs::SaeRun direct = hs::run_sae(cache, *sae);
    const hs::TargetMetric target = hs::target_metric(cache, pos, std::nullopt, std::nullopt);
    hs::GradOptions options;
    options.keep = {hs::HookPoint::ResidPre};
    const hs::GradientCache grad = hs::backward(cache, target.metric, options);
    return hs::RowVectorXf(hs::latent_attribution(*sae, direct, grad.rows(hs::HookPoint::ResidPre, 2)).row(pos));
  };
  const int p1 = run->n_pos() - 1, p2 = 3;
  // The analysis returns the activations alone; shown, the table lists them at once with the
  // attribution column pending, and the |attribution| list is empty until they come.
  const auto first = computeFor(UnitKind::Latent, run, key_at(p1));
  REQUIRE(first->base);
  CHECK(!first->base->attribution());
  const auto second = computeFor(UnitKind::Latent, run, key_at(p2));
  REQUIRE(second->base);
  CHECK(second->base != first->base);
  CHECK(!second->base->attribution());
  selection.setPosition(p1);
  view.setResult(first);
  CHECK(view.attributionPending());
  CHECK(tableUnits(view.unitTable()) == first->base->by_activation);
  CHECK(view.unitTable()->item(0, 2)->text() == QStringLiteral("computing…"));
  CHECK(view.statusText().contains(QStringLiteral("computing")));
  view.setSortByAttribution(true);
  CHECK(view.unitTable()->rowCount() == 0);
  CHECK(view.tableCsv().count(QLatin1Char('\n')) == 1);  // the header only
  // Another position is shown before the first job lands: the table ends with that position's
  // attributions, never the first's.
  selection.setPosition(p2);
  view.setResult(second);
  QTRY_VERIFY(!view.attributionPending());
  REQUIRE(second->base->attribution());
  const hs::RowVectorXf want = reference(p2);
  CHECK((second->base->attribution()->attribution - want).cwiseAbs().maxCoeff() <= 1e-5f * want.cwiseAbs().maxCoeff());
  CHECK(tableUnits(view.unitTable()) == second->base->attribution()->by_attribution);
  const int top = second->base->attribution()->by_attribution.front();
  CHECK(view.unitTable()->item(0, 2)->text() == formatSigned(second->base->attribution()->attribution(top)));
  // The first job, finished or not, filled only its own base; computed again it is p1's.
  const auto a1 = UnitsView::computeAttribution(*first->base);
  const hs::RowVectorXf want1 = reference(p1);
  CHECK((a1->attribution - want1).cwiseAbs().maxCoeff() <= 1e-5f * want1.cwiseAbs().maxCoeff());
  CHECK(view.statusText().contains(QStringLiteral("Computed in")));
}

TEST_CASE("Features view: a keystroke encodes only the rows that changed, and every row's latents are its own",
          "[units]") {
  ClearSaes clear;
  QTemporaryDir tmp;
  const QString dir = tmp.filePath(QStringLiteral("sae"));
  const auto model = builtinModel();
  writeSaeFolder(dir, model->config().d_model, 64, "blocks.2.hook_resid_pre", 26);
  hs::SaeSet set = hs::load_sae_folder(dir.toStdString());
  const auto sae = std::make_shared<const hs::Sae>(std::move(set.saes.front()));
  const QString id = LoadedSaes::instance().add(dir, sae);
  auto key_for = [&](const RunResult& run) {
    AnalysisKey key;
    key.pos = run.n_pos() - 1;
    key.params = {id, QStringLiteral("-1")};
    return key;
  };
  // A prompt, the same typed on (its prefix reused by the forward pass), then another prompt.
  const auto first = builtinRun(kPrompt);
  auto typed = AnalysisController::computeRun(model, kPrompt + QStringLiteral(" mat"), first->run.cache);
  typed->job = 2;
  REQUIRE(typed->run.cache->reused_prefix > 0);
  const auto other = builtinRun(QStringLiteral("A dog ran in the park."));
  const auto a = computeFor(UnitKind::Latent, first, key_for(*first));
  REQUIRE(a->base);
  CHECK(a->base->acts.dense() == hs::run_sae(*first->run.cache, *sae).feature_acts);
  for (const std::shared_ptr<const RunResult>& run : {std::shared_ptr<const RunResult>(typed), other}) {
    const auto r = computeFor(UnitKind::Latent, run, key_for(*run));
    REQUIRE(r->base);
    const hs::RowMatrixXf x = hs::hook_rows(*run->run.cache, sae->hook_in);  // [pos, d_in]
    const hs::RowMatrixXf full = hs::sae_encode(*sae, x);
    REQUIRE(r->base->acts.rows() == x.rows());
    // Each row is an encoding of this run's row (float32 products in another batch may round
    // differently: 1e-5 of the row's largest latent), and bit for bit the naive encoder's choice
    // of which latents are active.
    const hs::RowMatrixXf naive = hs::sae_encode_naive(*sae, x);
    for (Eigen::Index p = 0; p < x.rows(); ++p) {
      const float scale = std::max(1.0f, naive.row(p).cwiseAbs().maxCoeff());
      CHECK((r->base->acts.row(p) - full.row(p)).cwiseAbs().maxCoeff() <= 1e-5f * scale);
      CHECK((r->base->acts.row(p) - naive.row(p)).cwiseAbs().maxCoeff() <= 1e-4f * scale);
    }
    CHECK(r->base->by_activation.size() == size_t(UnitsView::kTopUnits));
  }
  // The typed run's rows before the key are the first run's latents, bit for bit.
  const auto t = computeFor(UnitKind::Latent, typed, key_for(*typed));
  const int kept = typed->run.cache->reused_prefix;
  CHECK(t->base->acts.dense().topRows(kept) == a->base->acts.dense().topRows(kept));
  // and shared, not copied: the unchanged rows are the same objects
  for (Eigen::Index p = 0; p < kept; ++p) CHECK(t->base->acts.sharesRow(a->base->acts, p));
}

TEST_CASE("The window refuses an SAE that does not fit its model with a message, and features follow typing",
          "[units][window]") {
  ClearSaes clear;
  QTemporaryDir tmp;
  const auto model = builtinModel();
  const QString good = tmp.filePath(QStringLiteral("fits"));
  const QString bad = tmp.filePath(QStringLiteral("narrow"));
  writeSaeFolder(good, model->config().d_model, 64, "blocks.2.hook_resid_pre", 7);
  writeSaeFolder(bad, model->config().d_model / 2, 64, "blocks.2.hook_resid_pre", 8);

  MainWindowOptions options;
  options.model_dir = builtinModelDir();
  options.text = QStringLiteral("The cat sat");
  options.restore_settings = false;
  options.view = QStringLiteral("features");
  MainWindow window(options);
  window.resize(1400, 900);
  window.show();
  REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }, 30000));
  auto* view = window.viewAs<UnitsView>(QStringLiteral("features"));
  REQUIRE(view);
  CHECK(window.tabs()->currentWidget() == view);
  CHECK(view->messageText().contains(QStringLiteral("No sparse autoencoder is loaded")));

  QSignalSpy failed(&window, &MainWindow::saeLoadFailed);
  QSignalSpy loaded(&window, &MainWindow::saeLoaded);
  window.loadSaeFolder(bad);
  REQUIRE(waitFor([&] { return failed.count() == 1; }));
  const QString message = failed.at(0).at(1).toString();
  INFO(message.toStdString());
  CHECK(message.contains(QString::number(model->config().d_model / 2)));
  CHECK(LoadedSaes::instance().empty());
  auto* box = window.findChild<QMessageBox*>(QStringLiteral("saeLoadError"));
  REQUIRE(box);
  CHECK(box->informativeText().contains(QStringLiteral("256")));  // what the model has
  box->close();
  window.loadSaeFolder(tmp.filePath(QStringLiteral("no-such-folder")));
  REQUIRE(waitFor([&] { return failed.count() == 2; }));

  window.loadSaeFolder(good);
  REQUIRE(waitFor([&] { return loaded.count() == 1; }));
  REQUIRE(LoadedSaes::instance().list().size() == 1);
  CHECK(view->saeId() == LoadedSaes::instance().list().front().id);
  REQUIRE(waitFor([&] { return view->isCurrent(); }, 30000));
  CHECK(view->unitTable()->rowCount() > 0);

  // Typing: every keystroke's run lands, and the view ends on the last one's latents.
  window.promptEdit()->setFocus();
  window.promptEdit()->moveCursor(QTextCursor::End);
  QTest::keyClicks(window.promptEdit(), QStringLiteral(" on the mat"));
  REQUIRE(waitFor([&] {
    const auto run = window.controller()->currentRun();
    return run && run->run.text == QStringLiteral("The cat sat on the mat").toStdString() && view->isCurrent();
  }, 30000));
  const auto run = window.controller()->currentRun();
  const auto result = std::dynamic_pointer_cast<const UnitsResult>(view->result());
  REQUIRE(result);
  REQUIRE(result->base);
  CHECK(result->base->acts.rows() == run->n_pos());
  CHECK(result->base->target.pos == run->n_pos() - 1);
}

TEST_CASE("Neurons view: the chosen neuron's dashboard from an opened scan folder, never one of another layer or model",
          "[units][dashboards]") {
  struct ClearDashboards {
    ClearDashboards() { LoadedDashboards::instance().clear(); }
    ~ClearDashboards() { LoadedDashboards::instance().clear(); }
  } clear;
  QTemporaryDir tmp;
  const std::filesystem::path dir = tmp.path().toStdString();
  {
    std::ofstream in(dir / "prompts.txt");
    in << "The cat sat on the mat, and the cat slept.\nShe saw a big dog. The big dog saw her too.\n";
  }
  const auto model = builtinModel();
  hs::ScanOptions o;
  o.input = dir / "prompts.txt";
  o.units = "mlp:" + std::to_string(kLayer);
  o.threads = 1;
  o.aggregates = {"induction"};
  hs::ScanState s = hs::new_scan_state(*model, o, hs::scan_settings(*model, o));
  hs::run_scan(*model, o, s);
  hs::write_unit_dashboards(*model, hs::resolve_unit_source(*model, o.units), s.units, s.settings, dir / "scan.units");
  // The same folder as another model's: its fingerprint changed.
  std::filesystem::create_directories(dir / "other.units");
  {
    nlohmann::json index = nlohmann::json::parse(std::ifstream(dir / "scan.units" / "index.json"));
    index["model"]["fingerprint"] = "0123456789abcdef";
    std::ofstream(dir / "other.units" / "index.json") << index.dump();
  }
  int64_t unit = 0;
  while (s.units.active(unit) < 3) ++unit;

  const auto run = builtinRun();
  Selection selection;
  selection.setBounds(run->n_layer(), run->n_head(), run->n_pos());
  selection.setLayer(kLayer);
  selection.setPosition(run->n_pos() - 1);
  UnitsView view(UnitKind::Neuron, &selection);
  view.resize(1300, 820);
  view.show();
  view.setRun(run);
  AnalysisKey key = view.analysisKey(keyFromSelection(selection, UnitsView::neuronsDescriptor().analysis.reads));
  key.params = {QString::number(unit)};
  const auto result = computeFor(UnitKind::Neuron, run, key);
  REQUIRE(result->unit == static_cast<int>(unit));
  view.setResult(result);
  CHECK(view.dashboardLabel()->text().contains(QStringLiteral("File &gt; Scan Data Set")));

  // Another model's folder: not shown, and the message says why.
  LoadedDashboards::instance().add(
      std::make_shared<const hs::UnitDashboardIndex>(hs::read_unit_dashboard_index(dir / "other.units")));
  CHECK(view.dashboardLabel()->text().contains(QStringLiteral("another model")));
  CHECK(view.shownDashboard().second == -1);

  // This model's: the unit's dashboard, as the reader reads it.
  const auto index = std::make_shared<const hs::UnitDashboardIndex>(hs::read_unit_dashboard_index(dir / "scan.units"));
  LoadedDashboards::instance().add(index);
  REQUIRE(waitFor([&] { return view.shownDashboard().second == unit; }, 10000));
  CHECK(view.shownDashboard().first == QString::fromStdString(index->folder.string()));
  const hs::UnitDashboard d = hs::read_unit_dashboard(*index, unit);
  CHECK(view.dashboardWidget()->isVisibleTo(&view));
  CHECK_FALSE(view.dashboardLabel()->isVisibleTo(&view));
  CHECK(view.dashboardWidget()->topRows()->rowCount() == static_cast<int>(d.examples_top.size()));
  CHECK(view.dashboardWidget()->histogram()->barCount() == static_cast<int>(d.bar_heights.size()));
  CHECK(view.dashboardWidget()->summaryLabel()->text().contains(QStringLiteral("max activation")));

  // Another layer's neurons: the folder (of layer kLayer) is not theirs.
  selection.setLayer(kLayer - 1);
  AnalysisKey other_key = view.analysisKey(keyFromSelection(selection, UnitsView::neuronsDescriptor().analysis.reads));
  other_key.params = {QString::number(unit)};
  view.setResult(computeFor(UnitKind::Neuron, run, other_key));
  REQUIRE(waitFor([&] { return view.shownDashboard().second == -1; }, 10000));
  CHECK(view.dashboardLabel()->isVisibleTo(&view));
  CHECK(view.dashboardLabel()->text().contains(QStringLiteral("None of the 2 opened dashboard folders")));
}

TEST_CASE("The built-in model's own SAEs load in one click, and its units' dashboards build from its held-out passages "
          "with progress and are found again by the next window",
          "[units][window][dashboards]") {
  ClearSaes clear_saes;
  struct ClearDashboards {
    ClearDashboards() { LoadedDashboards::instance().clear(); }
    ~ClearDashboards() { LoadedDashboards::instance().clear(); }
  } clear;
  // A copy of the built-in model (the same files: the same fingerprint) with one of its SAEs and
  // three held-out passages, so the build is quick under the sanitizers too.
  QTemporaryDir tmp;
  const std::filesystem::path builtin = hs::builtin_model_dir();
  const std::filesystem::path dir = std::filesystem::path(tmp.path().toStdString()) / "tiny";
  std::filesystem::create_directories(dir / "saes");
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    std::filesystem::copy_file(builtin / f, dir / f);
  std::filesystem::copy(builtin / "saes" / "resid_pre_2", dir / "saes" / "resid_pre_2");
  REQUIRE(std::filesystem::is_regular_file(builtin / "heldout.jsonl"));  // what the built-in model ships
  {
    std::ifstream shipped(builtin / "heldout.jsonl");
    std::ofstream out(dir / "heldout.jsonl");
    std::string line;
    for (int i = 0; i < 3 && std::getline(shipped, line); ++i) out << line << '\n';
  }

  MainWindowOptions options;
  options.model_dir = QString::fromStdString(dir.string());
  options.text = QStringLiteral("The cat sat on the mat");
  options.restore_settings = false;
  options.view = QStringLiteral("features");
  auto window = std::make_unique<MainWindow>(options);
  window->resize(1400, 900);
  window->show();
  REQUIRE(waitFor([&] { return window->controller()->currentRun() != nullptr; }, 30000));
  auto* view = window->viewAs<UnitsView>(QStringLiteral("features"));
  REQUIRE(view);
  REQUIRE(waitFor([&] { return view->messageText().contains(QStringLiteral("load-shipped")); }, 10000));
  CHECK(view->messageText().contains(QStringLiteral("comes with one of its own")));

  // One click loads the model's saes/ folder (a second click while it loads does not load it twice).
  Q_EMIT view->messageLabel()->linkActivated(QStringLiteral("load-shipped"));
  window->loadShippedSaes(options.model_dir);
  REQUIRE(waitFor([&] { return !LoadedSaes::instance().empty() && view->isCurrent(); }, 30000));
  QTest::qWait(200);
  REQUIRE(LoadedSaes::instance().list().size() == 1);
  const QString sae_folder = QString::fromStdString((dir / "saes" / "resid_pre_2").string());
  CHECK(QDir(LoadedSaes::instance().list().front().folder) == QDir(sae_folder));
  const int unit = view->shownUnit();
  REQUIRE(unit >= 0);

  // No dashboards yet: the box offers to build them from heldout.jsonl.
  REQUIRE(waitFor([&] { return view->dashboardLabel()->text().contains(QStringLiteral("href=\"build\"")); }, 10000));
  CHECK(view->dashboardLabel()->text().contains(QStringLiteral("build these latents' dashboards")));
  QStringList seen;  // what the box said while building
  QObject::connect(&LoadedDashboards::instance(), &LoadedDashboards::buildChanged, view,
                   [&] { seen << view->dashboardLabel()->text(); });
  Q_EMIT view->dashboardLabel()->linkActivated(QStringLiteral("build"));
  CHECK(LoadedDashboards::instance().building() == QStringLiteral("sae:") + LoadedSaes::instance().list().front().folder);
  REQUIRE(waitFor([&] { return view->shownDashboard().second == unit; }, 120000));
  CHECK(LoadedDashboards::instance().building().isEmpty());
  CHECK(std::any_of(seen.begin(), seen.end(), [](const QString& t) {
    return t.contains(QStringLiteral("Building the dashboards of these latents")) && t.contains(QStringLiteral("of 3 done"));
  }));
  // Written in the app's data folder, and the same files headscope-cli scan --units makes of them.
  const auto indexes = LoadedDashboards::instance().list();
  REQUIRE(indexes.size() == 1);
  const std::filesystem::path folder = indexes.front()->folder;
  CHECK(folder.filename().string().rfind("heldout_sae-resid_pre_2_", 0) == 0);
  CHECK(QDir(QString::fromStdString(folder.parent_path().string())) ==
        QDir(QDir(QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation)).filePath(QStringLiteral("dashboards"))));
  const auto model = window->controller()->model();
  hs::ScanOptions o;
  o.input = dir / "heldout.jsonl";
  o.units = "sae:" + (dir / "saes" / "resid_pre_2").string();
  o.max_tokens = model->config().n_ctx;
  hs::ScanState expected = hs::new_scan_state(*model, o, hs::scan_settings(*model, o));
  hs::run_scan(*model, o, expected);
  CHECK(expected.prompts == 3);
  const std::filesystem::path core = dir / "core.units";
  hs::write_unit_dashboards(*model, hs::resolve_unit_source(*model, o.units), expected.units, expected.settings, core);
  const std::string name = "u" + std::to_string(unit) + ".json";
  auto text = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  REQUIRE(std::filesystem::exists(folder / name));
  CHECK(text(folder / name) == text(core / name));
  // The head grid keeps its scores: a build is not a scan of the person's data set.
  CHECK(window->dataSetScan() == nullptr);

  // The next window (a later session) finds them without being told.
  window.reset();
  LoadedDashboards::instance().clear();
  MainWindow again(options);
  REQUIRE(waitFor([&] { return LoadedDashboards::instance().list().size() == 1; }, 30000));
  CHECK(LoadedDashboards::instance().list().front()->folder == folder);
  std::filesystem::remove_all(folder);
}
