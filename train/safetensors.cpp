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

const char* st_dtype(DType d) {
  switch (d) {
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::Int64:
      return "I64";
    case DType::Bool:
      return "BOOL";
  }
  return "?";
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& t,
                      const Metadata& metadata) {
  std::string header = "{";
  std::string data;
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) header += ",";
      header += json::quote(it->first) + ":" + json::quote(it->second);
    }
    header += "}";
    first = false;
  }
  for (const auto& [name, tensor] : t) {
    const Tensor c = tensor.contiguous();
    const size_t nbytes = size_t(c.numel()) * dtype_size(c.dtype());
    const size_t begin = data.size();
    const char* src = nullptr;
    switch (c.dtype()) {
      case DType::Float32:
        src = reinterpret_cast<const char*>(c.data<float>());
        break;
      case DType::Float64:
        src = reinterpret_cast<const char*>(c.data<double>());
        break;
      case DType::Int64:
        src = reinterpret_cast<const char*>(c.data<int64_t>());
        break;
      case DType::Bool:
        src = reinterpret_cast<const char*>(c.data<bool>());
        break;
    }
    data.append(src, nbytes);
    if (!first) header += ",";
    first = false;
    header += json::quote(name) + ":{\"dtype\":\"" + st_dtype(c.dtype()) + "\",\"shape\":[";
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
  const size_t data_begin = 8 + n;
  const size_t data_size = file.size() - data_begin;
  SafeTensors out;
  for (size_t ti = 0; ti < h.keys.size(); ++ti) {
    const std::string& name = h.keys[ti];
    const json::Value& v = h.values[ti];
    if (name == "__metadata__") {
      for (size_t j = 0; j < v.keys.size(); ++j) {
        const std::string& k = v.keys[j];
        const json::Value& mv = v.values[j];
        if (mv.kind != json::Value::Kind::String)
          throw fail("metadata '" + k + "' is not a string");
        out.metadata[k] = mv.str;
      }
      continue;
    }
    const json::Value* dt = v.find("dtype");
    const json::Value* shape = v.find("shape");
    const json::Value* off = v.find("data_offsets");
    if (!dt || !shape || !off || off->items.size() != 2 || shape->kind != json::Value::Kind::Array)
      throw fail("entry '" + name + "' lacks dtype, shape or data_offsets");
    DType dtype;
    if (dt->str == "F32")
      dtype = DType::Float32;
    else if (dt->str == "F64")
      dtype = DType::Float64;
    else if (dt->str == "I64")
      dtype = DType::Int64;
    else if (dt->str == "BOOL")
      dtype = DType::Bool;
    else
      throw fail("entry '" + name + "' has unsupported dtype " + dt->str);
    Shape s;
    int64_t numel = 1;
    try {
      for (const auto& d : shape->items) {
        s.push_back(d.as_int());
        if (s.back() < 0) throw std::runtime_error("negative size");
        numel *= s.back();
      }
    } catch (const std::exception& e) {
      throw fail("entry '" + name + "' shape: " + e.what());
    }
    int64_t b = 0, e = 0;
    try {
      b = off->items[0].as_int();
      e = off->items[1].as_int();
    } catch (const std::exception& ex) {
      throw fail("entry '" + name + "' offsets: " + ex.what());
    }
    if (b < 0 || e < b || size_t(e) > data_size ||
        size_t(e - b) != size_t(numel) * dtype_size(dtype))
      throw fail("entry '" + name + "' offsets do not match its shape or the file size");
    Tensor t = empty(s, dtype);
    if (numel > 0) {
      void* dst = nullptr;
      switch (dtype) {
        case DType::Float32:
          dst = t.data<float>();
          break;
        case DType::Float64:
          dst = t.data<double>();
          break;
        case DType::Int64:
          dst = t.data<int64_t>();
          break;
        case DType::Bool:
          dst = t.data<bool>();
          break;
      }
      std::memcpy(dst, file.data() + data_begin + b, size_t(e - b));
    }
    out.tensors.emplace_back(name, std::move(t));
  }
  return out;
}

}  // namespace tg::train
