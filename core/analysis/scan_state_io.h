// What the scan's two datasets (head_dataset.cpp, unit_dataset.cpp) share: the sampling key of an
// (input index, position), and the arrays of their saved states as base64 strings (core/io/base64.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/io/base64.h"
#include "core/io/splitmix64.h"
#include "core/model/config_json.h"

namespace hs {

// The same on every machine and in every shard, so that merged samples equal one process's.
inline uint64_t sample_hash(int64_t index, int position) {
  return splitmix64_mix(splitmix64_mix(static_cast<uint64_t>(index) + 0x9e3779b97f4a7c15ULL) ^
                        static_cast<uint64_t>(position));
}

template <typename T>
std::string encode_array(const std::vector<T>& v) {
  return base64_encode(v.data(), v.size() * sizeof(T));
}

// Decodes `what` into exactly `n` values of T, refusing any other length before allocating.
template <typename T>
std::vector<T> decode_array(const nlohmann::json& j, size_t n, const std::string& what) {
  if (!j.is_string()) throw Error(what + " is " + json_brief(j) + ", not a base64 string");
  const std::string& text = j.get_ref<const std::string&>();
  const int64_t bytes = base64_decoded_size(text);
  if (bytes < 0 || static_cast<uint64_t>(bytes) != n * sizeof(T))
    throw Error(what + " holds " + std::to_string(bytes < 0 ? 0 : bytes / static_cast<int64_t>(sizeof(T))) +
                " values; the shape says " + std::to_string(n));
  const std::vector<uint8_t> raw = base64_decode(text, what);
  std::vector<T> out(n);
  if (n > 0) std::memcpy(out.data(), raw.data(), n * sizeof(T));
  return out;
}

}  // namespace hs
