#include "core/model/shard_index.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace hs {

std::vector<std::string> parse_shard_index(std::string_view text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(where + ": not valid JSON (" + json_error_reason(e) + "). Restore the checkpoint's original index.");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    throw Error(where + ": has no \"weight_map\" naming the shard of each tensor. Restore the checkpoint's original "
                "index, or save the model as one model.safetensors.");
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string())
      throw Error(where + ": the shard of tensor \"" + tensor + "\" is not a file name.");
    const std::string name = shard.get<std::string>();
    if (!seen.insert(name).second) continue;
    // Shards lie beside the index: a name with a folder in it could point anywhere, and one with a
    // NUL byte ("\u0000" in JSON) would open the file named by its part before the NUL.
    if (name.empty() || name.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos || name == "." ||
        name == "..")
      throw Error(where + ": names the shard \"" + name + "\"; shards must be files in the same folder as the index.");
    out.push_back(name);
  }
  return out;
}

}  // namespace hs
