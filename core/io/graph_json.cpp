// Attribution graphs as Neuronpedia's graph JSON (graph_json.h).
#include "core/io/graph_json.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"

namespace hs {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// circuit-tracer's feature number of a transcoder latent (frontend/graph_models.py,
// Node.feature_node: cantor_pairing(layer, feat_idx)).
int64_t cantor_pairing(int64_t x, int64_t y) { return (x + y) * (x + y + 1) / 2 + y; }

std::string probability_text(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", p);
  return buf;
}

}  // namespace

std::string graph_to_json(const AttributionGraph& g, const PrunedGraph& pruned, const GraphLabels& labels) {
  const int N = g.n_nodes();
  // Features and errors only when a kept edge touches them (create_used_nodes_and_edges).
  std::vector<char> connected(static_cast<size_t>(N), 0);
  ordered_json links = ordered_json::array();
  for (const auto& [target, source] : pruned.edges) {
    if (!pruned.kept(target) || !pruned.kept(source)) continue;
    connected[static_cast<size_t>(target)] = connected[static_cast<size_t>(source)] = 1;
    links.push_back({{"source", g.node_id(source)},
                     {"target", g.node_id(target)},
                     {"weight", double{g.adjacency(target, source)}}});
  }
  ordered_json nodes = ordered_json::array();
  for (int i = 0; i < N; ++i) {
    if (!pruned.kept(i)) continue;
    const AttributionGraph::Kind kind = g.kind(i);
    const bool always = kind == AttributionGraph::Kind::Token || kind == AttributionGraph::Kind::Logit;
    if (!always && !connected[static_cast<size_t>(i)]) continue;
    const int layer = g.node_layer(i), pos = g.node_pos(i);
    // Node's fields, in its order (frontend/graph_models.py); what differs by kind first.
    int64_t feature = 0;
    std::string layer_text = std::to_string(layer), type, js_id, clerp;
    double token_prob = 0.0;
    bool target_logit = false;
    ordered_json influence = pruned.cumulative_scores[static_cast<size_t>(i)], activation = nullptr;
    switch (kind) {
      case AttributionGraph::Kind::Feature: {
        const AttributionGraph::Feature& f = g.active[static_cast<size_t>(g.selected[static_cast<size_t>(i)])];
        feature = cantor_pairing(f.layer, f.latent);
        // Neuronpedia's schema leaves feature_type free (its examples are circuit-tracer's); no
        // graph writer we know of has neuron nodes, so they are "mlp neuron", which circuit-tracer's
        // frontend draws as a feature that has no transcoder dashboard.
        type = g.unit == AttributionGraph::Unit::Neuron ? "mlp neuron" : "cross layer transcoder";
        js_id = std::to_string(f.layer) + "_" + std::to_string(f.latent) + "-0";
        activation = double{f.activation};
        break;
      }
      case AttributionGraph::Kind::Error:
        feature = -1;
        type = "mlp reconstruction error";
        // The later circuit-tracer graph files' form, beside the node id "{layer}_-1_{pos}".
        js_id = std::to_string(layer) + "_-1-" + std::to_string(pos);
        break;
      case AttributionGraph::Kind::Token:
        feature = pos;
        layer_text = "E";
        type = "embedding";
        js_id = "E_" + std::to_string(g.tokens[static_cast<size_t>(pos)]) + "-" + std::to_string(pos);
        break;
      case AttributionGraph::Kind::Logit: {
        const int k = i - g.logit_node(0);
        const int32_t t = g.logit_tokens[static_cast<size_t>(k)];
        const std::string text = static_cast<size_t>(k) < labels.logit_tokens.size() ? labels.logit_tokens[static_cast<size_t>(k)]
                                                                                     : std::to_string(t);
        feature = t;
        layer_text = std::to_string(g.n_layers + 1);
        type = "logit";
        token_prob = g.logit_probs[static_cast<size_t>(k)];
        target_logit = k == 0;
        js_id = "L_" + std::to_string(t) + "-" + std::to_string(pos);
        clerp = "Output \"" + text + "\" (p=" + probability_text(token_prob) + ")";
        influence = nullptr;
        break;
      }
    }
    ordered_json n;
    n["node_id"] = g.node_id(i);
    n["feature"] = feature;
    n["layer"] = layer_text;
    n["ctx_idx"] = pos;
    n["feature_type"] = type;
    n["token_prob"] = token_prob;
    n["is_target_logit"] = target_logit;
    n["run_idx"] = 0;
    n["reverse_ctx_idx"] = 0;
    n["jsNodeId"] = js_id;
    n["clerp"] = clerp;
    n["influence"] = influence;
    n["activation"] = activation;
    nodes.push_back(std::move(n));
  }
  ordered_json meta;
  meta["slug"] = labels.slug;
  meta["scan"] = labels.scan;
  meta["transcoder_list"] = labels.transcoder_list;
  meta["prompt_tokens"] = labels.prompt_tokens;
  meta["prompt"] = labels.prompt;
  meta["node_threshold"] = pruned.node_threshold;
  meta["schema_version"] = 1;
  meta["info"] = {{"creator_name", labels.creator},
                  {"creator_url", "https://github.com/headscope"},
                  {"source_urls", json::array()},
                  {"transcoder_set", labels.scan},
                  {"generator", {{"name", "HeadScope"}, {"version", HEADSCOPE_VERSION}, {"url", "https://github.com/headscope"}}},
                  {"create_time_ms", labels.create_time_ms}};
  meta["generation_settings"] = {{"max_n_logits", labels.options.max_logits},
                                 {"desired_logit_prob", labels.options.logit_probability},
                                 {"batch_size", labels.options.batch}};
  // The schema's max_feature_nodes is an integer: left out when every feature was a row.
  // The limit the graph was built under (a neuron graph's default when the options said none).
  const int limit = labels.options.max_feature_nodes > 0 ? labels.options.max_feature_nodes : g.max_feature_nodes;
  if (limit > 0) meta["generation_settings"]["max_feature_nodes"] = limit;
  meta["pruning_settings"] = {{"node_threshold", pruned.node_threshold}, {"edge_threshold", pruned.edge_threshold}};
  ordered_json out;
  out["metadata"] = std::move(meta);
  out["qParams"] = {{"pinnedIds", json::array()},
                    {"supernodes", json::array()},
                    {"linkType", "both"},
                    {"clickedId", ""},
                    {"sg_pos", ""}};
  out["nodes"] = std::move(nodes);
  out["links"] = std::move(links);
  // A token that is part of a character decodes to incomplete UTF-8; like Hugging Face's decode,
  // it is written with U+FFFD in its place.
  return out.dump(2, ' ', false, json::error_handler_t::replace);
}

namespace {

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw Error(source + " is not a graph file HeadScope can open: " + what +
              ". Give a graph JSON written by `headscope-cli graph` or circuit-tracer's create_graph_files.");
}

const json& field(const json& obj, const char* name, const std::string& where, const std::string& source) {
  const auto it = obj.find(name);
  if (it == obj.end()) bad(source, where + " has no \"" + name + "\"");
  return *it;
}

std::string string_field(const json& obj, const char* name, const std::string& where, const std::string& source) {
  const json& v = field(obj, name, where, source);
  if (!v.is_string()) bad(source, where + "'s \"" + name + "\" is not a string");
  return v.get<std::string>();
}

int64_t int_field(const json& obj, const char* name, const std::string& where, const std::string& source) {
  const json& v = field(obj, name, where, source);
  if (!v.is_number_integer()) bad(source, where + "'s \"" + name + "\" is not an integer");
  return v.get<int64_t>();
}

std::optional<double> optional_number(const json& obj, const char* name, const std::string& where, const std::string& source) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad(source, where + "'s \"" + name + "\" is not a number");
  const double v = it->get<double>();
  if (!std::isfinite(v)) bad(source, where + "'s \"" + name + "\" is not a finite number");
  return v;
}

}  // namespace

GraphFile read_graph_json(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    bad(source, "it is not JSON");
  }
  if (!j.is_object()) bad(source, "it is not a JSON object");
  GraphFile g;
  const json& meta = field(j, "metadata", "the file", source);
  if (!meta.is_object()) bad(source, "\"metadata\" is not an object");
  g.slug = meta.contains("slug") && meta["slug"].is_string() ? meta["slug"].get<std::string>() : std::string();
  g.scan = meta.contains("scan") && meta["scan"].is_string() ? meta["scan"].get<std::string>() : std::string();
  g.prompt = meta.contains("prompt") && meta["prompt"].is_string() ? meta["prompt"].get<std::string>() : std::string();
  const json& tokens = field(meta, "prompt_tokens", "metadata", source);
  if (!tokens.is_array()) bad(source, "metadata.prompt_tokens is not an array");
  for (const json& t : tokens) {
    if (!t.is_string()) bad(source, "metadata.prompt_tokens holds something other than strings");
    g.prompt_tokens.push_back(t.get<std::string>());
  }
  g.node_threshold = optional_number(meta, "node_threshold", "metadata", source);
  if (meta.contains("schema_version")) g.schema_version = static_cast<int>(int_field(meta, "schema_version", "metadata", source));

  const json& nodes = field(j, "nodes", "the file", source);
  if (!nodes.is_array()) bad(source, "\"nodes\" is not an array");
  std::unordered_map<std::string, int> index;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& n = nodes[i];
    const std::string where = "node " + std::to_string(i);
    if (!n.is_object()) bad(source, where + " is not an object");
    GraphFile::Node out;
    out.node_id = string_field(n, "node_id", where, source);
    out.feature = int_field(n, "feature", where, source);
    out.layer = string_field(n, "layer", where, source);
    const int64_t ctx = int_field(n, "ctx_idx", where, source);
    out.feature_type = string_field(n, "feature_type", where, source);
    if (ctx < 0 || ctx >= static_cast<int64_t>(g.prompt_tokens.size()))
      bad(source, where + " (" + out.node_id + ") is at position " + std::to_string(ctx) + ", outside the " +
                      std::to_string(g.prompt_tokens.size()) + "-token prompt");
    out.ctx_idx = static_cast<int>(ctx);
    if (out.layer != "E") {
      if (out.layer.empty() || out.layer.size() > 6 || out.layer.find_first_not_of("0123456789") != std::string::npos)
        bad(source, where + "'s layer \"" + out.layer + "\" is neither a number nor \"E\"");
    }
    out.token_prob = optional_number(n, "token_prob", where, source).value_or(0.0);
    if (n.contains("is_target_logit") && n["is_target_logit"].is_boolean()) out.is_target_logit = n["is_target_logit"].get<bool>();
    if (n.contains("clerp") && n["clerp"].is_string()) out.clerp = n["clerp"].get<std::string>();
    out.influence = optional_number(n, "influence", where, source);
    out.activation = optional_number(n, "activation", where, source);
    if (!index.emplace(out.node_id, static_cast<int>(g.nodes.size())).second)
      bad(source, "the node id " + out.node_id + " appears twice");
    g.nodes.push_back(std::move(out));
  }
  const json& links = field(j, "links", "the file", source);
  if (!links.is_array()) bad(source, "\"links\" is not an array");
  for (size_t i = 0; i < links.size(); ++i) {
    const json& l = links[i];
    const std::string where = "link " + std::to_string(i);
    if (!l.is_object()) bad(source, where + " is not an object");
    const std::string s = string_field(l, "source", where, source), t = string_field(l, "target", where, source);
    const auto si = index.find(s), ti = index.find(t);
    if (si == index.end()) bad(source, where + " starts at " + s + ", which is not one of the nodes");
    if (ti == index.end()) bad(source, where + " ends at " + t + ", which is not one of the nodes");
    const std::optional<double> w = optional_number(l, "weight", where, source);
    if (!w) bad(source, where + " has no weight");
    g.links.push_back({si->second, ti->second, *w});
  }
  if (j.contains("qParams") && j["qParams"].is_object()) {
    const json& q = j["qParams"];
    if (q.contains("pinnedIds") && q["pinnedIds"].is_array())
      for (const json& p : q["pinnedIds"])
        if (p.is_string()) g.pinned_ids.push_back(p.get<std::string>());
    if (q.contains("supernodes") && q["supernodes"].is_array())
      for (const json& s : q["supernodes"]) {
        if (!s.is_array()) continue;
        std::vector<std::string> group;
        for (const json& x : s)
          if (x.is_string()) group.push_back(x.get<std::string>());
        if (!group.empty()) g.supernodes.push_back(std::move(group));
      }
  }
  return g;
}

}  // namespace hs
