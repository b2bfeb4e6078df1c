// The one error type of the core library. Its message is meant for a person: it names the file
// or item, what was expected, what was found, and where possible what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace hs {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace hs
