// safetensors files (https://github.com/huggingface/safetensors, "format" in its README):
//   8 bytes   little-endian u64 N, the header's length
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//              "__metadata__": {"key": "string value", ...}}
//   rest      the tensors' little-endian bytes, offsets relative to the end of the header
// We write F32, F64 and I64 tensors (contiguous copies), pad the header with spaces to a multiple
// of 8 so data stays aligned, and write the whole file atomically (core/file_io.h).
//
// Loaders of other programs' files (train/gpt2_weights.h) read the header alone with
// read_safetensors_header, which knows every dtype of the format (F16, BF16, U8, ...), and then
// each tensor's bytes straight into its destination, so a 6 GB file is never held twice.
//
// Not here: memory mapping, converting half types (the GPT-2 loader does), big-endian hosts.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg {

using Metadata = std::map<std::string, std::string>;

struct SafeTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  Metadata metadata;
  const Tensor* find(const std::string& name) const;
};

// Throws std::runtime_error "PATH: reason" when the file cannot be written.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& t,
                      const Metadata& metadata);
// The largest file load_safetensors reads (a gpt2-124m checkpoint with AdamW's moments is
// 1.5 GB), and the format's own limit on the header (100 MB in the reference reader).
inline constexpr uint64_t kMaxSafetensorsBytes = uint64_t(64) << 30;
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Throws std::runtime_error "PATH: reason" on a missing, truncated or malformed file: also a
// shape whose size overflows, byte ranges that do not tile the data region exactly (in order,
// no hole, no overlap, nothing after the last), and anything but a regular file.
SafeTensors load_safetensors(const std::string& path);
// The same checks on a file's bytes already read (`path` names it in the errors).
SafeTensors parse_safetensors(const std::string& file, const std::string& path);

// One tensor as the header describes it; dtype is the format's name ("F32", "F16", "BF16", ...).
struct SafeTensorInfo {
  std::string name, dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data region
};
struct SafeTensorsHeader {
  std::string path;
  std::vector<SafeTensorInfo> tensors;  // in header order
  Metadata metadata;
  uint64_t data_start = 0, file_size = 0;  // the data region's file offset (8 + header length)
  const SafeTensorInfo* find(const std::string& name) const;
};
// The header alone, checked as load_safetensors checks it (entries, sizes, the byte ranges tiling
// the rest of the file), with any of the format's dtypes. Same errors as load_safetensors.
SafeTensorsHeader read_safetensors_header(const std::string& path);
// The tensor's end - begin bytes into out. Throws std::runtime_error "PATH: ..." when the file
// has become shorter since its header was read.
void read_safetensors_bytes(const SafeTensorsHeader& h, const SafeTensorInfo& t, char* out);

}  // namespace tg
