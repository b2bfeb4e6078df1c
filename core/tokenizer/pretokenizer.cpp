#include "core/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

#include "core/error.h"

namespace hs::tokenizer_detail {

// \s as White_Space (PropList.txt, unchanged since Unicode 6.3), once for use inside [...].
#define HS_WHITE_SPACE R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" HS_WHITE_SPACE R"(\p{L}\p{N}]+)"
    R"(|[)" HS_WHITE_SPACE R"(]+(?![^)" HS_WHITE_SPACE R"(])|[)" HS_WHITE_SPACE R"(]+)";

#undef HS_WHITE_SPACE

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

namespace {

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};

// Compiled once per process; a compiled pattern (with its JIT code) may be used by many threads
// at once as long as each has its own match data.
struct CompiledPattern {
  std::unique_ptr<pcre2_code, CodeDeleter> code;
  bool jit = false;

  CompiledPattern() {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr));
    if (!code) {
      throw Error("internal error: GPT-2's pre-tokenizer pattern does not compile with this PCRE2 (" +
                  pcre2_message(error) + " at offset " + std::to_string(error_offset) + ")");
    }
    // JIT is an optimization; without it (e.g. a PCRE2 built without JIT) the interpreter runs.
    jit = pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE) == 0;
  }
};

const CompiledPattern& compiled_pattern() {
  static const CompiledPattern pattern;
  return pattern;
}

}  // namespace

Pretokenizer::Pretokenizer() {
  match_data_ = pcre2_match_data_create_from_pattern(compiled_pattern().code.get(), nullptr);
  if (match_data_ == nullptr) throw Error("out of memory while tokenizing (PCRE2 match data)");
}

Pretokenizer::~Pretokenizer() { pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_)); }

bool Pretokenizer::next(std::string_view& piece) {
  const CompiledPattern& pattern = compiled_pattern();
  auto* match = static_cast<pcre2_match_data*>(match_data_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text_.data());
  const PCRE2_SIZE length = text_.size();
  while (offset_ < length) {
    // The caller has checked the UTF-8, so PCRE2 need not check it again at every call.
    int rc = pattern.jit ? pcre2_jit_match(pattern.code.get(), subject, length, offset_, PCRE2_NO_UTF_CHECK, match, nullptr)
                         : PCRE2_ERROR_JIT_BADOPTION;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // No JIT, or its stack ran out: the interpreter has no such limit for this pattern.
      rc = pcre2_match(pattern.code.get(), subject, length, offset_, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) {  // unreachable: every character matches some branch
      offset_ = length;
      return false;
    }
    if (rc < 0) {
      throw Error("internal error: GPT-2's pre-tokenizer failed at byte " + std::to_string(offset_) + " (" +
                  pcre2_message(rc) + ")");
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const PCRE2_SIZE begin = ovector[0], end = ovector[1];
    if (end <= begin) {  // no branch matches the empty string; guard the loop anyway
      offset_ = begin + 1;
      while (offset_ < length && (subject[offset_] & 0xC0) == 0x80) ++offset_;
      continue;
    }
    piece = text_.substr(begin, end - begin);
    offset_ = end;
    return true;
  }
  return false;
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  Pretokenizer pretokenizer(text);
  std::string_view piece;
  while (pretokenizer.next(piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace hs::tokenizer_detail
