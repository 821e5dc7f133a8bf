// safetensors reader and writer (see safetensors.h).
#include "core/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bfloat16.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/text.h"

namespace tg {

const Tensor* SafeTensors::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

namespace {

// The format's dtypes and their element sizes; the first five are DType's, in its order.
struct DTypeInfo {
  const char* name;
  int size;
};
constexpr DTypeInfo kAllDTypes[] = {{"F32", 4},  {"F64", 8},     {"I64", 8},    {"BOOL", 1},
                                    {"BF16", 2}, {"F16", 2},     {"U8", 1},     {"I8", 1},
                                    {"I16", 2},  {"U16", 2},     {"I32", 4},    {"U32", 4},
                                    {"U64", 8},  {"F8_E4M3", 1}, {"F8_E5M2", 1}};
// F32, F64, I64, BOOL, BF16: the ones load_safetensors makes tensors of.
constexpr int kOwnDTypes = 5;
static_assert(int(DType::Float32) == 0 && int(DType::Float64) == 1 && int(DType::Int64) == 2 &&
              int(DType::Bool) == 3 && int(DType::BFloat16) == 4);

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
    case DType::BFloat16:
      return reinterpret_cast<char*>(t.data<bfloat16>());
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

// The header is built first, then the file goes out as pieces: the header, then each tensor's
// bytes from its own storage (a non-contiguous one as a contiguous copy), so saving a model and
// its moments needs no second copy of them.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& t,
                      const Metadata& metadata) {
  std::string header = "{";
  if (!metadata.empty()) header += metadata_json(metadata);
  std::vector<Tensor> kept;  // the contiguous tensors whose bytes the pieces point into
  std::vector<std::string_view> pieces(1);  // [0]: the length and the header, set below
  size_t offset = 0;
  for (const auto& [name, tensor] : t) {
    const Tensor& c = kept.emplace_back(tensor.contiguous());
    const size_t begin = offset, n = size_t(c.numel()) * dtype_size(c.dtype());
    if (n > 0) pieces.emplace_back(bytes_of(c), n);
    offset += n;
    if (header.size() > 1) header += ",";
    header +=
        json::quote(name) + ":{\"dtype\":\"" + kAllDTypes[int(c.dtype())].name + "\",\"shape\":[";
    for (size_t d = 0; d < c.shape().size(); ++d) {
      if (d) header += ',';
      header += std::to_string(c.shape()[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(offset) + "]}";
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // keeps the data 8-byte aligned
  std::string head(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) head[i] = char((n >> (8 * i)) & 0xFF);
  head += header;
  pieces[0] = head;
  write_file_atomic(path, pieces);
}

namespace {

// One header entry as read, before its bytes are copied: dtype k indexes kAllDTypes.
struct Entry {
  std::string name;
  int k = 0;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// Reads one header entry {"dtype", "shape", "data_offsets"}: sizes are checked for int64
// overflow before anything is allocated; `fail` makes the file's error. Only the first
// `n_dtypes` of kAllDTypes are accepted.
template <class Fail>
Entry read_entry(const std::string& name, const json::Value& v, int n_dtypes, const Fail& fail) {
  if (v.kind != json::Value::Kind::Object)
    throw fail("entry '" + show_name(name) + "' is not an object");
  const json::Value* dt = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* off = v.find("data_offsets");
  if (!dt || !shape || !off || off->kind != json::Value::Kind::Array || off->items.size() != 2 ||
      shape->kind != json::Value::Kind::Array)
    throw fail("entry '" + show_name(name) + "' lacks dtype, shape or data_offsets");
  if (v.keys.size() != 3)
    throw fail("entry '" + show_name(name) + "' has fields besides dtype, shape and data_offsets");
  int k = 0;
  while (k < n_dtypes && (dt->kind != json::Value::Kind::String || dt->str != kAllDTypes[k].name))
    ++k;
  if (k == n_dtypes)
    throw fail("entry '" + show_name(name) + "' has unsupported dtype " + show_name(dt->str));
  Entry e{name, k, {}, 0, 0};
  int64_t bytes = kAllDTypes[k].size;
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
    throw fail("entry '" + show_name(name) + "': " + ex.what());
  }
  if (e.end - e.begin != uint64_t(bytes))
    throw fail("entry '" + show_name(name) + "' has " + std::to_string(e.end - e.begin) +
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
      throw fail("entry '" + show_name(e.name) + "' starts at byte " + std::to_string(e.begin) +
                 ", not " + std::to_string(at) +
                 (e.begin < at ? " (overlaps another)" : " (a hole before it)"));
    at = e.end;
  }
  if (at != data_size)
    throw fail("the tensors cover " + std::to_string(at) + " bytes of a data region of " +
               std::to_string(data_size));
}

// The header's length from the file's first 8 bytes, checked against the file's size.
template <class Fail>
uint64_t header_length(std::string_view first8, uint64_t file_size, const Fail& fail) {
  if (file_size < 8) throw fail("shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(first8[size_t(i)]);
  if (n > file_size - 8) throw fail("header length " + std::to_string(n) + " past the end");
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " above the format's limit of " +
               std::to_string(kMaxHeaderBytes));
  return n;
}

// The header's entries (in header order) and metadata, the layout checked against data_size.
template <class Fail>
std::vector<Entry> parse_header(std::string_view header, uint64_t data_size, int n_dtypes,
                                Metadata& metadata, const Fail& fail) {
  if (header.empty() || header[0] != '{') throw fail("header does not start with '{'");
  json::Value h;
  try {
    h = json::parse(header);
  } catch (const json::Error& e) {
    throw fail(std::string("header ") + e.what());
  }
  if (h.kind != json::Value::Kind::Object) throw fail("header is not an object");
  std::vector<Entry> entries;
  for (size_t ti = 0; ti < h.keys.size(); ++ti) {
    const std::string& name = h.keys[ti];
    const json::Value& v = h.values[ti];
    if (name != "__metadata__") {
      entries.push_back(read_entry(name, v, n_dtypes, fail));
      continue;
    }
    if (v.kind != json::Value::Kind::Object) throw fail("__metadata__ is not an object");
    for (size_t j = 0; j < v.keys.size(); ++j) {
      if (v.values[j].kind != json::Value::Kind::String)
        throw fail("metadata '" + show_name(v.keys[j]) + "' is not a string");
      metadata[v.keys[j]] = v.values[j].str;
    }
  }
  check_layout(entries, data_size, fail);
  return entries;
}

auto file_error(const std::string& path) {
  return [path](const std::string& why) -> std::runtime_error {
    return std::runtime_error(path + ": not a valid safetensors file (" + why + ")");
  };
}

}  // namespace

SafeTensors load_safetensors(const std::string& path) {
  return parse_safetensors(read_regular_file(path, kMaxSafetensorsBytes, "safetensors"), path);
}

SafeTensors parse_safetensors(const std::string& file, const std::string& path) {
  const auto fail = file_error(path);
  const uint64_t n = header_length(file, file.size(), fail);
  const std::string_view data = std::string_view(file).substr(8 + n);
  SafeTensors out;
  const std::vector<Entry> entries = parse_header(std::string_view(file).substr(8, n), data.size(),
                                                  kOwnDTypes, out.metadata, fail);
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, DType(e.k));
    if (e.end > e.begin) std::memcpy(bytes_of(t), data.data() + e.begin, size_t(e.end - e.begin));
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

const SafeTensorInfo* SafeTensorsHeader::find(const std::string& name) const {
  for (const SafeTensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

// A descriptor closed on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// n bytes at offset into out, or false when the file ends first or cannot be read.
bool pread_all(int fd, char* out, uint64_t n, uint64_t offset) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out + done, size_t(std::min<uint64_t>(n - done, 1 << 30)),
                              off_t(offset + done));
    if (r <= 0) return false;
    done += uint64_t(r);
  }
  return true;
}

}  // namespace

SafeTensorsHeader read_safetensors_header(const std::string& path) {
  const auto fail = file_error(path);
  const Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + ": not a regular file");
  SafeTensorsHeader out;
  out.path = path;
  out.file_size = uint64_t(st.st_size);
  std::string first8(8, '\0');
  if (out.file_size >= 8 && !pread_all(f.fd, first8.data(), 8, 0))
    throw std::runtime_error(path + ": cannot read the header");
  const uint64_t n = header_length(first8, out.file_size, fail);
  std::string header(n, '\0');
  if (!pread_all(f.fd, header.data(), n, 8))
    throw std::runtime_error(path + ": cannot read the header");
  out.data_start = 8 + n;
  for (const Entry& e : parse_header(header, out.file_size - out.data_start,
                                     int(std::size(kAllDTypes)), out.metadata, fail))
    out.tensors.push_back({e.name, kAllDTypes[e.k].name, e.shape, e.begin, e.end});
  return out;
}

void read_safetensors_bytes(const SafeTensorsHeader& h, const SafeTensorInfo& t, char* out) {
  const Fd f{::open(h.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) throw std::runtime_error(h.path + ": " + std::strerror(errno));
  if (!pread_all(f.fd, out, t.end - t.begin, h.data_start + t.begin))
    throw std::runtime_error(h.path + ": '" + show_name(t.name) +
                             "' is cut short (the file changed while it was read?)");
}

}  // namespace tg
