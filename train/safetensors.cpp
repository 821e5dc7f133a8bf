// safetensors reader and writer (see safetensors.h).
#include "train/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/file_io.h"
#include "core/json.h"

namespace tg::train {

const Tensor* SafeTensors::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

namespace {

// safetensors' dtype names, in DType's order.
constexpr const char* kDTypeNames[] = {"F32", "F64", "I64", "BOOL"};
static_assert(int(DType::Float32) == 0 && int(DType::Float64) == 1 && int(DType::Int64) == 2 &&
              int(DType::Bool) == 3);

// The bytes of a contiguous tensor.
char* bytes_of(const Tensor& t) {
  switch (t.dtype()) {
    case DType::Float32:
      return reinterpret_cast<char*>(t.data<float>());
    case DType::Float64:
      return reinterpret_cast<char*>(t.data<double>());
    case DType::Int64:
      return reinterpret_cast<char*>(t.data<int64_t>());
    case DType::Bool:
      return reinterpret_cast<char*>(t.data<bool>());
  }
  return nullptr;
}

std::string metadata_json(const Metadata& metadata) {
  std::string out = "\"__metadata__\":{";
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    if (it != metadata.begin()) out += ",";
    out += json::quote(it->first) + ":" + json::quote(it->second);
  }
  return out + "}";
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& t,
                      const Metadata& metadata) {
  std::string header = "{";
  if (!metadata.empty()) header += metadata_json(metadata);
  std::string data;
  for (const auto& [name, tensor] : t) {
    const Tensor c = tensor.contiguous();
    const size_t begin = data.size();
    if (c.numel() > 0) data.append(bytes_of(c), size_t(c.numel()) * dtype_size(c.dtype()));
    if (header.size() > 1) header += ",";
    header += json::quote(name) + ":{\"dtype\":\"" + kDTypeNames[int(c.dtype())] + "\",\"shape\":[";
    for (size_t d = 0; d < c.shape().size(); ++d) {
      if (d) header += ',';
      header += std::to_string(c.shape()[d]);
    }
    header +=
        "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // keeps the data 8-byte aligned
  std::string file(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = char((n >> (8 * i)) & 0xFF);
  file += header;
  file += data;
  write_file_atomic(path, file);
}

namespace {

// Reads one header entry {"dtype", "shape", "data_offsets"} and its bytes from `data` (what
// follows the header); `fail` makes the file's error.
template <class Fail>
Tensor read_entry(const std::string& name, const json::Value& v, std::string_view data,
                  const Fail& fail) {
  const json::Value* dt = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* off = v.find("data_offsets");
  if (!dt || !shape || !off || off->items.size() != 2 || shape->kind != json::Value::Kind::Array)
    throw fail("entry '" + name + "' lacks dtype, shape or data_offsets");
  int k = 0;
  while (k < 4 && dt->str != kDTypeNames[k]) ++k;
  if (k == 4) throw fail("entry '" + name + "' has unsupported dtype " + dt->str);
  const DType dtype = DType(k);
  Shape s;
  int64_t numel = 1, b = 0, e = 0;
  try {
    for (const auto& d : shape->items) {
      s.push_back(d.as_int());
      if (s.back() < 0) throw std::runtime_error("negative size");
      numel *= s.back();
    }
  } catch (const std::exception& ex) {
    throw fail("entry '" + name + "' shape: " + ex.what());
  }
  try {
    b = off->items[0].as_int();
    e = off->items[1].as_int();
  } catch (const std::exception& ex) {
    throw fail("entry '" + name + "' offsets: " + ex.what());
  }
  if (b < 0 || e < b || size_t(e) > data.size() ||
      size_t(e - b) != size_t(numel) * dtype_size(dtype))
    throw fail("entry '" + name + "' offsets do not match its shape or the file size");
  Tensor t = empty(s, dtype);
  if (numel > 0) std::memcpy(bytes_of(t), data.data() + b, size_t(e - b));
  return t;
}

}  // namespace

SafeTensors load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  auto fail = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error(path + ": not a valid safetensors file (" + why + ")");
  };
  if (file.size() < 8) throw fail("shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  if (n > file.size() - 8) throw fail("header length " + std::to_string(n) + " past the end");
  json::Value h;
  try {
    h = json::parse(std::string_view(file).substr(8, n));
  } catch (const json::Error& e) {
    throw fail(std::string("header ") + e.what());
  }
  if (h.kind != json::Value::Kind::Object) throw fail("header is not an object");
  const std::string_view data = std::string_view(file).substr(8 + n);
  SafeTensors out;
  for (size_t ti = 0; ti < h.keys.size(); ++ti) {
    const std::string& name = h.keys[ti];
    const json::Value& v = h.values[ti];
    if (name != "__metadata__") {
      out.tensors.emplace_back(name, read_entry(name, v, data, fail));
      continue;
    }
    for (size_t j = 0; j < v.keys.size(); ++j) {
      if (v.values[j].kind != json::Value::Kind::String)
        throw fail("metadata '" + v.keys[j] + "' is not a string");
      out.metadata[v.keys[j]] = v.values[j].str;
    }
  }
  return out;
}

}  // namespace tg::train
