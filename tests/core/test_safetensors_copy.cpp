// SafetensorsFile::copy_mapped: the bytes a mapping shows, read through the file instead.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor/safetensors.h"

namespace fs = std::filesystem;

namespace {

// One U8 tensor "t" of n bytes 0, 1, 2, ... (mod 251), as a safetensors file's bytes.
std::string tensor_file(int64_t n) {
  std::string header = "{\"t\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(n) + "],\"data_offsets\":[0," +
                       std::to_string(n) + "]}}";
  while (header.size() % 8) header += ' ';
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  for (int64_t i = 0; i < n; ++i) bytes += static_cast<char>(i % 251);
  return bytes;
}

}  // namespace

TEST_CASE("copy_mapped reads the bytes the mapping shows, and nothing outside it", "[safetensors]") {
  const fs::path dir = fs::temp_directory_path() / ("hs_copy_mapped_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / "model.safetensors";
  const int64_t n = 3 * 4096 + 123;  // spans pages, ends mid-page
  const std::string bytes = tensor_file(n);
  std::ofstream(path, std::ios::binary) << bytes;

  const auto file = hs::SafetensorsFile::open(path);
  const auto memory = hs::SafetensorsFile::from_bytes(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "in memory");
  for (const auto& f : {file, memory}) {
    INFO(f->name());
    const std::span<const uint8_t> raw = f->raw_bytes(*f->find("t"));
    REQUIRE(static_cast<int64_t>(raw.size()) == n);
    for (const auto& [at, count] : std::vector<std::pair<size_t, size_t>>{{0, 1}, {5, 4096}, {4000, 200}, {0, raw.size()}}) {
      std::vector<uint8_t> out(count, 0xee);
      REQUIRE(f->copy_mapped(raw.data() + at, count, out.data()));
      CHECK(std::memcmp(out.data(), raw.data() + at, count) == 0);
    }
    // A range that is not (wholly) this file's is declined, untouched.
    std::vector<uint8_t> out(16, 0xee), other(64);
    CHECK_FALSE(f->copy_mapped(other.data(), 16, out.data()));
    CHECK_FALSE(f->copy_mapped(raw.data() + raw.size() - 8, 16, out.data()));
    CHECK(out == std::vector<uint8_t>(16, 0xee));
  }

  // The file shortened on disk after it was opened: a clear error, not a crash or stale bytes.
  fs::resize_file(path, bytes.size() - 1000);
  const std::span<const uint8_t> raw = file->raw_bytes(*file->find("t"));
  std::vector<uint8_t> out(2000);
  try {
    file->copy_mapped(raw.data() + raw.size() - 2000, 2000, out.data());
    FAIL("no error for a file shortened after it was opened");
  } catch (const hs::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("shorter than when it was opened"));
    CHECK_THAT(e.what(), Catch::Contains(path.string()));
  }
  fs::remove_all(dir);
}
