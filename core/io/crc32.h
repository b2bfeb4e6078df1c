// CRC-32 as zip (and so NPZ) stores it: the reflected polynomial 0xEDB88320, initial value and
// final XOR 0xFFFFFFFF (the "ISO-HDLC" CRC of zlib's crc32()).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hs {

// The CRC-32 of `n` bytes following bytes whose CRC-32 is `crc` (0 for none), so a record written
// in pieces is checked piece by piece: crc32(b, nb, crc32(a, na)) == crc32 of a then b.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace hs
