// headscope-cli tokenize: a text's token ids and their texts, as JSON.
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"

namespace hs::cli {
namespace {

using nlohmann::json;

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

int tokenize(const Args& a) {
  const std::string text = a.text("--text");
  const auto m = load_model(a);
  const std::vector<int32_t> ids = m->tokenizer().encode(text);
  json tokens = json::array(), labels = json::array();
  // The labels the window shows: a character split across tokens is named in each of them.
  const std::vector<std::string> in_context = hs::display_in_context(m->tokenizer(), ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string bytes = m->tokenizer().token_bytes(ids[i]);
    tokens.push_back(valid_utf8(bytes) ? bytes : m->tokenizer().display(ids[i]));
    labels.push_back(in_context[i]);
  }
  std::cout << json{{"ids", ids}, {"tokens", tokens}, {"labels", labels}}.dump() << "\n";
  return 0;
}

}  // namespace

const CommandSpec& tokenize_command() {
  static const CommandSpec c{
      .name = "tokenize",
      .summary = "a text's token ids, texts and labels, as JSON (never adds BOS)",
      .synopsis = {"[--model DIR] --text TEXT"},
      .help = R"(Usage: headscope-cli tokenize [--model DIR] --text TEXT

Prints {"ids": [...], "tokens": [...], "labels": [...]} as JSON. "tokens" holds each token's text
(or its display label when the token is only part of a UTF-8 character); "labels" shows spaces
as '␣' and newlines as '↵', bytes that are not a whole character in hex ("‹E6 97›"), and a
character split across tokens in each of them ("日‹E6 97›", "日‹A5›"), as the window does.
Never adds BOS.
)",
      .options = {model_option(), required(text_option("the text to tokenize"), "tokenize needs --text TEXT.")},
      .run = tokenize,
  };
  return c;
}

}  // namespace hs::cli
