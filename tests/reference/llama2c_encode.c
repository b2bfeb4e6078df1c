// llama2.c's own encoder, as the independent reference for hs::Llama2cTokenizer: run.c
// (../shared/peers/llama2.c, MIT) is compiled in unchanged, with its main renamed.
//
//   llama2c_encode_reference TOKENIZER.bin VOCAB_SIZE TEXTS
//
// TEXTS holds the texts, each ended by a NUL byte. Prints one line per text: its ids as run.c's
// encode(text, bos=0, eos=0) gives them, separated by spaces.
#define main llama2c_run_main
#include RUN_C_PATH
#undef main

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s TOKENIZER.bin VOCAB_SIZE TEXTS\n", argv[0]);
    return 2;
  }
  Tokenizer tokenizer;
  build_tokenizer(&tokenizer, argv[1], atoi(argv[2]));
  FILE* f = fopen(argv[3], "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", argv[3]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* texts = malloc(size + 1);
  if (fread(texts, 1, size, f) != (size_t)size) return 1;
  fclose(f);
  texts[size] = '\0';
  for (long at = 0; at < size; at += strlen(texts + at) + 1) {
    char* text = texts + at;
    int* tokens = malloc((strlen(text) + 3) * sizeof(int));
    int n = 0;
    encode(&tokenizer, text, 0, 0, tokens, &n);
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", tokens[i]);
    printf("\n");
    free(tokens);
  }
  free(texts);
  free_tokenizer(&tokenizer);
  return 0;
}
