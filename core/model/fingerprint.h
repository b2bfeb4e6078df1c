// A model's fingerprint: which weights and tokenizer a result was made with, so that a result kept
// beyond its run (a data set's scores, a scan's output, later a dashboard) is never shown as
// another model's. Two folders of the same family and shape are different models unless their
// files hold the same bytes.
//
// The fingerprint hashes each file's size and, for the small files (config.json, the tokenizer's
// files, anything under 4 MiB), every byte; for a weight file, its first 1 MiB (the safetensors
// header, which names every tensor, its dtype, shape and offsets, and the first tensors' data),
// 64 blocks of 4 KiB spread evenly over the rest, and its last 4 KiB. Any retrained or fine-tuned
// model differs in those samples; a copy of the same files elsewhere, on this machine or another,
// has the same fingerprint. Reading it costs a few megabytes, not the model's size.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace hs {

// 16 lowercase hex digits over `files`, in the order given (the order is part of the hash).
// Throws hs::Error naming a file that cannot be read.
std::string files_fingerprint(const std::vector<std::filesystem::path>& files);

}  // namespace hs
