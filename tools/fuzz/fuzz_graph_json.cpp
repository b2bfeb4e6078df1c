// Fuzz target: an attribution graph's JSON as the Graph view opens it (read_graph_json,
// core/io/graph_json.h), written by headscope-cli graph, circuit-tracer or Neuronpedia, possibly
// edited. Either it is refused with hs::Error, or the graph it gives can be drawn without a check of
// its own: every link joins two of its nodes, every node's position is inside the prompt, node ids
// are unique, and every number is finite or absent.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/io/graph_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  hs::GraphFile g;
  try {
    g = hs::read_graph_json(text, "fuzz.json");
  } catch (const hs::Error&) {
    return 0;
  }
  std::set<std::string> ids;
  for (const hs::GraphFile::Node& n : g.nodes) {
    if (n.ctx_idx < 0 || n.ctx_idx >= static_cast<int>(g.prompt_tokens.size())) std::abort();
    if (!ids.insert(n.node_id).second) std::abort();
    if (!std::isfinite(n.token_prob)) std::abort();
    if (n.influence && !std::isfinite(*n.influence)) std::abort();
    if (n.activation && !std::isfinite(*n.activation)) std::abort();
    if (n.layer != "E" && (n.layer.empty() || n.layer.size() > 6)) std::abort();
  }
  for (const hs::GraphFile::Link& l : g.links) {
    if (l.source < 0 || l.source >= static_cast<int>(g.nodes.size())) std::abort();
    if (l.target < 0 || l.target >= static_cast<int>(g.nodes.size())) std::abort();
    if (!std::isfinite(l.weight)) std::abort();
  }
  return 0;
}
