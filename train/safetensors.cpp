// safetensors reader and writer (see safetensors.h).
#include "train/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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

// One header entry as read, before its bytes are copied.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// Reads one header entry {"dtype", "shape", "data_offsets"}: sizes are checked for int64
// overflow before anything is allocated; `fail` makes the file's error.
template <class Fail>
Entry read_entry(const std::string& name, const json::Value& v, const Fail& fail) {
  if (v.kind != json::Value::Kind::Object) throw fail("entry '" + name + "' is not an object");
  const json::Value* dt = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* off = v.find("data_offsets");
  if (!dt || !shape || !off || off->kind != json::Value::Kind::Array || off->items.size() != 2 ||
      shape->kind != json::Value::Kind::Array)
    throw fail("entry '" + name + "' lacks dtype, shape or data_offsets");
  if (v.keys.size() != 3)
    throw fail("entry '" + name + "' has fields besides dtype, shape and data_offsets");
  int k = 0;
  while (k < 4 && (dt->kind != json::Value::Kind::String || dt->str != kDTypeNames[k])) ++k;
  if (k == 4) throw fail("entry '" + name + "' has unsupported dtype " + dt->str);
  Entry e{name, DType(k), {}, 0, 0};
  int64_t bytes = int64_t(dtype_size(e.dtype));
  try {
    for (const auto& d : shape->items) {
      e.shape.push_back(d.as_int());
      if (e.shape.back() < 0) throw std::runtime_error("negative size");
      if (__builtin_mul_overflow(bytes, e.shape.back(), &bytes))
        throw std::runtime_error("element count overflows int64");
    }
    const int64_t b = off->items[0].as_int(), en = off->items[1].as_int();
    if (b < 0 || en < b)
      throw std::runtime_error("offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                               "] are not a range");
    e.begin = uint64_t(b);
    e.end = uint64_t(en);
  } catch (const std::exception& ex) {
    throw fail("entry '" + name + "': " + ex.what());
  }
  if (e.end - e.begin != uint64_t(bytes))
    throw fail("entry '" + name + "' has " + std::to_string(e.end - e.begin) +
               " bytes but its dtype and shape need " + std::to_string(bytes));
  return e;
}

// The format's rule: the entries' byte ranges, in offset order, tile the data region exactly
// (the first starts at 0, each starts where the previous ends, the last ends at the file's end):
// no hole, no overlap, no trailing byte. Anything else means a shifted or spliced file.
template <class Fail>
void check_layout(std::vector<Entry> entries, uint64_t data_size, const Fail& fail) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    if (e.begin != at)
      throw fail("entry '" + e.name + "' starts at byte " + std::to_string(e.begin) + ", not " +
                 std::to_string(at) +
                 (e.begin < at ? " (overlaps another)" : " (a hole before it)"));
    at = e.end;
  }
  if (at != data_size)
    throw fail("the tensors cover " + std::to_string(at) + " bytes of a data region of " +
               std::to_string(data_size));
}

}  // namespace

SafeTensors load_safetensors(const std::string& path) {
  return parse_safetensors(read_regular_file(path, kMaxSafetensorsBytes, "safetensors"), path);
}

SafeTensors parse_safetensors(const std::string& file, const std::string& path) {
  auto fail = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error(path + ": not a valid safetensors file (" + why + ")");
  };
  if (file.size() < 8) throw fail("shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  if (n > file.size() - 8) throw fail("header length " + std::to_string(n) + " past the end");
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " above the format's limit of " +
               std::to_string(kMaxHeaderBytes));
  const std::string_view header = std::string_view(file).substr(8, n);
  if (header.empty() || header[0] != '{') throw fail("header does not start with '{'");
  json::Value h;
  try {
    h = json::parse(header);
  } catch (const json::Error& e) {
    throw fail(std::string("header ") + e.what());
  }
  if (h.kind != json::Value::Kind::Object) throw fail("header is not an object");
  const std::string_view data = std::string_view(file).substr(8 + n);
  SafeTensors out;
  std::vector<Entry> entries;
  for (size_t ti = 0; ti < h.keys.size(); ++ti) {
    const std::string& name = h.keys[ti];
    const json::Value& v = h.values[ti];
    if (name != "__metadata__") {
      entries.push_back(read_entry(name, v, fail));
      continue;
    }
    if (v.kind != json::Value::Kind::Object) throw fail("__metadata__ is not an object");
    for (size_t j = 0; j < v.keys.size(); ++j) {
      if (v.values[j].kind != json::Value::Kind::String)
        throw fail("metadata '" + v.keys[j] + "' is not a string");
      out.metadata[v.keys[j]] = v.values[j].str;
    }
  }
  check_layout(entries, data.size(), fail);
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(bytes_of(t), data.data() + e.begin, size_t(e.end - e.begin));
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace tg::train
