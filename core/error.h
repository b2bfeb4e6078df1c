// The one error type of the core library. Its message is meant for a person: it names the file
// or item, what was expected, what was found, and where possible what to do about it.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace hs {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Long work stopped because the person asked it to (a cancelled sweep): not a failure to report.
class Cancelled : public Error {
 public:
  Cancelled() : Error("cancelled.") {}
};

// A JSON parser's exception as a phrase for an hs::Error message: nlohmann's
// "[json.exception.parse_error.101] parse error at line 1, column 2: ..." without the bracketed
// id, which means nothing to a person, and at most 300 bytes of it (then "...").
std::string json_error_reason(const std::exception& e);

}  // namespace hs
