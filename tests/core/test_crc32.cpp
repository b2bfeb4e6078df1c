// The one CRC-32 (core/io/crc32.h) that the NPZ writer and reader share.
#include <catch2/catch.hpp>

#include <string>

#include "core/io/crc32.h"

TEST_CASE("crc32 gives zip's check values and continues across pieces", "[io][crc32]") {
  const std::string check = "123456789";
  CHECK(hs::crc32(check.data(), check.size()) == 0xCBF43926u);  // the CRC catalogue's check value
  CHECK(hs::crc32(nullptr, 0) == 0u);
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  CHECK(hs::crc32(fox.data(), fox.size()) == 0x414FA339u);
  for (size_t cut = 0; cut <= fox.size(); ++cut)
    CHECK(hs::crc32(fox.data() + cut, fox.size() - cut, hs::crc32(fox.data(), cut)) == 0x414FA339u);
}
