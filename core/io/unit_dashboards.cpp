#include "core/io/unit_dashboards.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hs {

namespace {

using nlohmann::json;

constexpr size_t kMaxList = 4096;  // more entries than any list the scan writes

const json& field(const json& j, const char* name, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) throw Error(where + " has no \"" + name + "\"");
  return j.at(name);
}
double number(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_number()) throw Error(where + ": \"" + name + "\" is not a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw Error(where + ": \"" + name + "\" is not finite");
  return x;
}
int64_t integer(const json& j, const char* name, const std::string& where, int64_t lo, int64_t hi) {
  const json& v = field(j, name, where);
  if (!v.is_number_integer()) throw Error(where + ": \"" + name + "\" is not an integer");
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
  if (x < lo || x > hi) throw Error(where + ": \"" + name + "\" is out of range");
  return x;
}
const json& list(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_array() || v.size() > kMaxList) throw Error(where + ": \"" + name + "\" is not a list (of at most 4096)");
  return v;
}

UnitDashboardExample example(const json& e, const std::string& where) {
  UnitDashboardExample x;
  x.index = integer(e, "index", where, 0, INT64_MAX);
  x.position = static_cast<int>(integer(e, "position", where, 0, 1 << 24));
  x.first = static_cast<int>(integer(e, "first", where, 0, x.position));
  for (const json& t : list(e, "tokens", where)) {
    if (!t.is_string()) throw Error(where + ": a token is not a string");
    x.tokens.push_back(t.get<std::string>());
  }
  for (const json& v : list(e, "values", where)) {
    if (!v.is_number()) throw Error(where + ": a value is not a number");
    x.values.push_back(v.get<float>());
  }
  if (x.values.size() != x.tokens.size() || x.position - x.first >= static_cast<int>(x.tokens.size()))
    throw Error(where + ": its tokens, values and position do not agree");
  x.max_value = static_cast<float>(number(e, "maxValue", where));
  return x;
}

json parse(std::string_view text, const std::string& source) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(source + " is not a JSON object");
  return j;
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error("cannot read " + p.string() + ": it does not exist or is not readable.");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

UnitDashboard parse_unit_dashboard(std::string_view text, const std::string& source) {
  const json j = parse(text, source);
  try {
    UnitDashboard d;
    d.unit = integer(j, "unit", source, 0, INT64_MAX);
    d.index = static_cast<int>(integer(j, "index", source, 0, INT32_MAX));
    d.layer = static_cast<int>(integer(j, "layer", source, -1, 1 << 16));
    const json& hook = field(j, "hook", source);
    if (!hook.is_string()) throw Error(source + ": \"hook\" is not a string");
    d.hook = hook.get<std::string>();
    d.act_max = static_cast<float>(number(j, "act_max", source));
    d.frac_nonzero = number(j, "frac_nonzero", source);
    if (d.frac_nonzero < 0 || d.frac_nonzero > 1) throw Error(source + ": \"frac_nonzero\" is not in [0, 1]");
    d.active_count = integer(j, "active_count", source, 0, INT64_MAX);
    d.positions = integer(j, "positions", source, 0, INT64_MAX);
    const json& h = field(j, "histogram", source);
    for (const json& e : list(h, "bin_edges", source + " histogram")) {
      if (!e.is_number()) throw Error(source + ": a bin edge is not a number");
      d.bin_edges.push_back(e.get<double>());
    }
    for (const json& c : list(h, "bar_heights", source + " histogram")) {
      if (!c.is_number_integer() || c.get<int64_t>() < 0) throw Error(source + ": a bar height is not a count");
      d.bar_heights.push_back(c.get<int64_t>());
    }
    if (!d.bar_heights.empty() && d.bin_edges.size() != d.bar_heights.size() + 1)
      throw Error(source + ": the histogram's edges are not one more than its bars");
    for (auto [name, into] : {std::pair{"top_logits", &d.top_logits}, std::pair{"bottom_logits", &d.bottom_logits}})
      for (const json& l : list(j, name, source)) {
        UnitDashboard::Logit x;
        x.token = static_cast<int32_t>(integer(l, "token", source, 0, INT32_MAX));
        const json& t = field(l, "text", source);
        if (!t.is_string()) throw Error(source + ": a logit's text is not a string");
        x.text = t.get<std::string>();
        x.value = static_cast<float>(number(l, "value", source));
        into->push_back(std::move(x));
      }
    for (const json& e : list(j, "examples_top", source)) d.examples_top.push_back(example(e, source + " examples_top"));
    for (const json& q : list(j, "examples_quantiles", source)) {
      UnitDashboardQuantile x;
      x.quantile_low = number(q, "quantile_low", source);
      x.quantile_high = number(q, "quantile_high", source);
      x.act_low = static_cast<float>(number(q, "act_low", source));
      x.act_high = static_cast<float>(number(q, "act_high", source));
      x.size = integer(q, "size", source, 0, INT64_MAX);
      for (const json& e : list(q, "examples", source)) x.examples.push_back(example(e, source + " examples_quantiles"));
      d.examples_quantiles.push_back(std::move(x));
    }
    return d;
  } catch (const json::exception& e) {
    throw Error(source + ": " + e.what());
  }
}

UnitDashboardIndex parse_unit_dashboard_index(std::string_view text, const std::string& source) {
  const json j = parse(text, source);
  try {
    if (j.value("format", std::string()) != "headscope-unit-dashboards")
      throw Error(source + " is not the index of unit dashboards (no \"format\": \"headscope-unit-dashboards\"); give a "
                  "folder written by `headscope-cli scan --units`.");
    if (integer(j, "version", source, 0, INT32_MAX) != 1) throw Error(source + " is of another version than 1");
    UnitDashboardIndex x;
    x.model = field(j, "model", source);
    x.source = field(j, "source", source);
    if (!x.model.is_object() || !x.source.is_object()) throw Error(source + ": \"model\" or \"source\" is not an object");
    x.units = integer(x.source, "units", source + " source", 0, int64_t{1} << 32);
    x.positions = integer(j, "positions", source, 0, INT64_MAX);
    const json& kind = field(x.source, "kind", source + " source");
    if (kind != "mlp" && kind != "sae") throw Error(source + ": the source's kind is neither \"mlp\" nor \"sae\"");
    const json& groups = field(x.source, "groups", source + " source");
    if (!groups.is_array()) throw Error(source + ": the source has no groups");
    int64_t first = 0;
    for (const json& g : groups) {
      if (!g.is_object()) throw Error(source + ": a source group is not an object");
      UnitDashboardGroup e;
      e.layer = static_cast<int>(integer(g, "layer", source + " source group", -1, 1 << 16));
      e.width = integer(g, "width", source + " source group", 1, int64_t{1} << 32);
      auto text = [&](const char* name) {
        const auto it = g.find(name);
        if (it == g.end()) return std::string();
        if (!it->is_string()) throw Error(source + ": a source group's \"" + name + "\" is not a string");
        return it->get<std::string>();
      };
      if (kind == "mlp") {
        e.hook_in = e.hook_out = text("hook");
      } else {
        e.hook_in = text("hook_in");
        e.hook_out = text("hook_out");
        e.architecture = text("architecture");
      }
      e.first = first;
      first += e.width;
      if (first > x.units) break;
      x.groups.push_back(std::move(e));
    }
    if (first != x.units)
      throw Error(source + ": the source's groups hold " + std::to_string(first) + " units, not its " +
                  std::to_string(x.units));
    return x;
  } catch (const json::exception& e) {
    throw Error(source + ": " + e.what());
  }
}

int64_t dashboard_unit(const UnitDashboardIndex& index, const std::string& model_fingerprint,
                       const DashboardUnitsQuery& q, int64_t i) {
  if (model_fingerprint.empty() || index.fingerprint() != model_fingerprint) return -1;
  if (index.source.value("kind", std::string()) != q.kind) return -1;
  if (q.kind == "sae" && index.source.value("sae", std::string()) != q.sae_name) return -1;
  for (const UnitDashboardGroup& g : index.groups) {
    if (g.layer != q.layer || g.width != q.width) continue;
    if (q.kind == "mlp" && g.hook_in != "blocks." + std::to_string(q.layer) + ".mlp.hook_post") continue;
    if (q.kind == "sae" && (g.hook_in != q.hook_in || g.hook_out != q.hook_out || g.architecture != q.architecture))
      continue;
    return i >= 0 && i < g.width ? g.first + i : -1;
  }
  return -1;
}

UnitDashboardIndex read_unit_dashboard_index(const std::filesystem::path& folder) {
  const std::filesystem::path p = folder / "index.json";
  UnitDashboardIndex x = parse_unit_dashboard_index(read_text(p), p.string());
  x.folder = folder;
  return x;
}

UnitDashboard read_unit_dashboard(const UnitDashboardIndex& index, int64_t unit) {
  if (unit < 0 || unit >= index.units)
    throw Error("unit " + std::to_string(unit) + " is not one of the " + std::to_string(index.units) + " in " +
                index.folder.string());
  const std::filesystem::path p = index.folder / ("u" + std::to_string(unit) + ".json");
  UnitDashboard d = parse_unit_dashboard(read_text(p), p.string());
  if (d.unit != unit) throw Error(p.string() + " holds unit " + std::to_string(d.unit) + ", not " + std::to_string(unit));
  return d;
}

}  // namespace hs
