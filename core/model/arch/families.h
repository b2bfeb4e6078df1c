// The registry's entries (architecture.cpp lists them), one file per family.
#pragma once

#include "core/model/architecture.h"

namespace hs::arch {

const ArchitectureFamily& gpt2();   // gpt2.cpp
const ArchitectureFamily& llama();  // llama.cpp
const ArchitectureFamily& qwen2();  // qwen2.cpp: the Llama block with q/k/v biases
const ArchitectureFamily& gpt_neox();  // gpt_neox.cpp

}  // namespace hs::arch
