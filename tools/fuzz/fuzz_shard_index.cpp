// Fuzz target: the index of a sharded checkpoint, model.safetensors.index.json
// (parse_shard_index, core/model/shard_index.h). Either it is refused with hs::Error, or it names at
// least one shard, each once, and every name is a plain file name that stays in the index's folder.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/model/shard_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> shards;
  try {
    shards = hs::parse_shard_index(text, "fuzz/model.safetensors.index.json");
  } catch (const hs::Error&) {
    return 0;
  }
  if (shards.empty()) __builtin_trap();
  std::set<std::string> seen;
  for (const std::string& name : shards) {
    if (!seen.insert(name).second) __builtin_trap();
    if (name.empty() || name == "." || name == "..") __builtin_trap();
    for (char ch : name)
      if (ch == '/' || ch == '\\' || ch == '\0') __builtin_trap();
  }
  return 0;
}
