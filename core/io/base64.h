// Base64 (RFC 4648, with padding) for the large arrays a scan's state carries inside its JSON: an
// array of a million integers or floats is a few megabytes as one string, where JSON numbers would
// take several times that to write and far more memory to parse.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hs {

std::string base64_encode(const void* data, size_t bytes);
// Throws hs::Error (naming `what`) for a character outside the alphabet or a length that is not a
// multiple of 4, or bad padding.
std::vector<uint8_t> base64_decode(std::string_view text, const std::string& what);
// How many bytes `text` decodes to, or -1 when its length cannot be base64 (checked before a
// caller sizes anything from it).
int64_t base64_decoded_size(std::string_view text);

}  // namespace hs
