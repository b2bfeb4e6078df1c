#include "core/error.h"

namespace hs {

std::string json_error_reason(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0)
    if (const size_t close = what.find("] "); close != std::string::npos) what.erase(0, close + 2);
  if (what.size() > 300) what = what.substr(0, 300) + "...";
  return what;
}

}  // namespace hs
