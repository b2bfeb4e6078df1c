// Fuzz target: the scan's input lines (parse_scan_row, core/analysis/scan.h), a text file of one
// prompt a line or JSON Lines with "text" or "clean"/"corrupt"/"answer"/"wrong" fields.
//
// The first byte says which (odd: JSON Lines); the rest is the file, cut into lines as the scan
// cuts it (std::getline). Every line must come back as a prompt, a patch row or one of the
// documented bad-line reasons, never an exception: the scan counts bad lines and goes on. A prompt
// is valid UTF-8 and not blank (what the tokenizer is then given); in a text file it is the line
// itself.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "core/analysis/scan.h"
#include "core/tokenizer/byte_level.h"

namespace {

bool blank(const std::string& t) {
  return std::all_of(t.begin(), t.end(), [](unsigned char ch) { return std::isspace(ch); });
}

bool usable(const std::string& t) { return !blank(t) && !hs::tokenizer_detail::find_invalid_utf8(t); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool jsonl = data[0] & 1;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  const std::vector<std::string>& reasons = hs::scan_bad_line_reasons();
  std::string line;
  while (std::getline(in, line)) {
    std::string expected_text = line;
    if (!expected_text.empty() && expected_text.back() == '\r') expected_text.pop_back();
    const hs::ScanRow row = hs::parse_scan_row(line, jsonl);
    switch (row.kind) {
      case hs::ScanRow::Kind::Bad:
        if (!row.bad_reason || std::find(reasons.begin(), reasons.end(), row.bad_reason) == reasons.end())
          __builtin_trap();
        break;
      case hs::ScanRow::Kind::Text:
        if (!usable(row.text)) __builtin_trap();
        if (!jsonl && row.text != expected_text) __builtin_trap();
        break;
      case hs::ScanRow::Kind::Patch:
        // The four fields are handed to the tokenizer as they are: valid UTF-8 (nlohmann decodes
        // \u escapes to it), though they may be blank (the scan refuses that after tokenizing).
        if (!jsonl) __builtin_trap();
        for (const std::string* f : {&row.clean, &row.corrupt, &row.answer, &row.wrong})
          if (hs::tokenizer_detail::find_invalid_utf8(*f)) __builtin_trap();
        break;
    }
  }
  return 0;
}
