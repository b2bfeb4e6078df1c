// The registry: one accessor per family (one file per family), and their list. Adding a family
// is its accessor and its place in the list, here.
#pragma once

#include <vector>

#include "core/model/architecture.h"

namespace hs::arch {

const ArchitectureFamily& gpt2();   // gpt2.cpp
const ArchitectureFamily& llama();  // llama.cpp
const ArchitectureFamily& qwen2();  // qwen2.cpp: the Llama block with q/k/v biases
const ArchitectureFamily& qwen3();  // qwen2.cpp: the Llama block with q/k norms
const ArchitectureFamily& gpt_neox();  // gpt_neox.cpp
const ArchitectureFamily& gemma2();    // gemma.cpp
const ArchitectureFamily& gemma3();    // gemma.cpp: Gemma 3's text model

// The families in the order they are looked up and listed (architecture_families(), and so every
// list of families a person reads).
inline std::vector<const ArchitectureFamily*> registry() { return {&gpt2(), &llama(), &qwen2(), &qwen3(), &gpt_neox(), &gemma2(), &gemma3()}; }

}  // namespace hs::arch
