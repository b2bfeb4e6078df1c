// Hugging Face's model.safetensors.index.json, the index of a sharded checkpoint:
// {"metadata": {...}, "weight_map": {tensor name: shard file name}}.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hs {

// The shard file names the index's weight_map names, each once, in the weight_map's order (nlohmann
// sorts its keys, so by tensor name). Every name is a plain file name in the index's folder: no
// folder in it, not "." or "..", no NUL byte. Throws hs::Error "<where>: ..." for text that is not
// such an index. Whether the files exist is the caller's question.
std::vector<std::string> parse_shard_index(std::string_view text, const std::string& where);

}  // namespace hs
