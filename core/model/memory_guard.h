// Refusing work that would not fit in memory, before allocating it.
//
// A large model needs its weights laid out for the forward pass, and the activation cache of a
// long prompt through it several times more; running out of memory half-way kills the program
// (or the machine) with no message. So Model::load and
// run_text/run_tokens first estimate what they will allocate and compare it with what the system
// can give, and refuse with a message that says how much is needed, how much is available and
// what to do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/forward.h"

namespace hs {

class SafetensorsFile;

// Bytes Model::load allocates for the weights of `file`, a model of `config`: the matrices the
// forward pass multiplies by are packed (Weights::packed), in 16 bits when the file's are 16-bit;
// every other F16 or BF16 tensor, and every F64 tensor (and any F32 tensor that is not 4-byte
// aligned in the file), is converted into an owned float32 buffer; aligned F32 tensors are read
// in place from the memory map and cost nothing here (the kernel pages them in from the file and
// can drop them again). The architecture description says which tensors are packed, and which a
// checkpoint may carry that are not weights.
uint64_t estimate_load_bytes(const SafetensorsFile& file, const ModelConfig& config);

// Bytes one run of `n_tokens` tokens needs: the arrays the ActivationCache stores (see cache.h;
// tests/core/test_memory_guard.cpp checks this against ActivationCache::stored_bytes()) plus the
// forward pass's and the export's transient buffers.
uint64_t estimate_cache_bytes(const ModelConfig& config, int64_t n_tokens, const RunOptions& options = {});

// What the system can give now: MemAvailable from /proc/meminfo, lowered to the room left under
// the memory limit of this process's cgroup (v2 memory.max - memory.current, or v1
// limit_in_bytes - usage_in_bytes) when one is set. nullopt when neither can be read.
// The environment variable HEADSCOPE_AVAILABLE_MEMORY (bytes, or with a K/M/G suffix) overrides
// the figure, and set_available_memory_override() overrides both (for tests).
std::optional<uint64_t> available_memory();
void set_available_memory_override(std::optional<uint64_t> bytes);

// "9.1 GB", "512 MB", "64 KB" (decimal units, as disk and memory tools print them).
std::string format_bytes(uint64_t bytes);

// Throw hs::Error when the estimate exceeds what is available (and do nothing when the available
// figure is unknown). `model_name` names the model in the message.
void check_load_memory(const SafetensorsFile& file, const ModelConfig& config, const std::string& model_name);
// The same for a checkpoint in several shards.
void check_load_memory(const std::vector<const SafetensorsFile*>& shards, const ModelConfig& config,
                       const std::string& model_name);
void check_run_memory(const ModelConfig& config, int64_t n_tokens, const RunOptions& options,
                      const std::string& model_name);

}  // namespace hs
