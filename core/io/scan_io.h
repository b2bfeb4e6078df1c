// Reading and writing the files of a data-set scan (core/analysis/scan.h): the JSON that holds
// everything (settings, counts, each accumulator's exact state, so a scan can be resumed or
// merged), and with an .npz output the mean, std and count arrays beside it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "core/analysis/scan.h"

namespace hs {

// Where a scan output's JSON lives: `out` itself, or beside an .npz as OUT.npz.json.
std::filesystem::path scan_json_path(const std::filesystem::path& out);

// Writes the JSON (everything, state included) and, when `out` ends in .npz, the arrays
// "<grid>.mean", "<grid>.std" and "<grid>.count" (float32) to `out`. Each file is written
// atomically (core/io/export.h): on any error, an existing file is left as it was.
void write_scan_output(const ScanState& state, const std::filesystem::path& out);

// Reads the JSON a scan wrote (give scan_json_path(out)). Throws hs::Error when it is missing,
// is not JSON, or is not a scan's output.
ScanState read_scan_output(const std::filesystem::path& json_path);
// The same from the file's text (it may come from another machine); `source` names it in messages.
ScanState scan_output_from_text(std::string_view text, const std::string& source);

}  // namespace hs
