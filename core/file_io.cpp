// See file_io.h.
#include "core/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <istream>
#include <random>
#include <stdexcept>

namespace tg {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw std::runtime_error(path + ": " + what + " (" + std::strerror(err) + ")");
}

// writev() until every piece is written, IOV_MAX pieces at a time; false with errno set on an
// error (EINTR retried). A partial write resumes inside the piece it stopped in.
bool write_all(int fd, const std::vector<std::string_view>& pieces) {
  size_t next = 0, skip = 0;  // the first piece not fully written, and its bytes already out
  while (next < pieces.size()) {
    std::vector<iovec> iov;
    for (size_t i = next; i < pieces.size() && iov.size() < size_t(IOV_MAX); ++i) {
      const size_t off = i == next ? skip : 0;
      if (pieces[i].size() > off)
        iov.push_back({const_cast<char*>(pieces[i].data() + off), pieces[i].size() - off});
    }
    if (iov.empty()) break;  // only empty pieces left
    const ssize_t w = ::writev(fd, iov.data(), int(iov.size()));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    for (size_t left = size_t(w); left > 0;) {
      const size_t rest = pieces[next].size() - skip;
      if (left < rest) {
        skip += left;
        break;
      }
      left -= rest;
      ++next;
      skip = 0;
    }
  }
  return true;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

namespace {

// Only a regular file (or nothing) is replaced: renaming over a device (/dev/null, /dev/full),
// a FIFO or a socket would swap the node itself for a regular file, which as root succeeds.
void refuse_non_regular(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error(path + (S_ISDIR(st.st_mode)
                                         ? ": is a directory, not a file"
                                         : ": not a regular file (a FIFO, device or socket); "
                                           "only a regular file is replaced"));
}

}  // namespace

void check_writable(const std::string& path) {
  refuse_non_regular(path);
  // A name of write_file_atomic's form, so a probe left by a killed run is cleaned up like a
  // temp file.
  const std::string probe = path + ".tmp." + std::to_string(::getpid()) + ".probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot write", errno);
  ::close(fd);
  ::unlink(probe.c_str());
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, std::vector<std::string_view>{bytes});
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  refuse_non_regular(path);
  // A writer killed by SIGKILL (no clean-up) left its temp file: this run removes it.
  remove_stale_temp_files(path);
  // A unique name per call, so two writers (or a crashed earlier run) never share a temp file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter++) + "." + std::to_string(std::random_device{}());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot write", errno);
  if (!write_all(fd, pieces) || ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, "write failed", e);
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "write failed", e);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename into place", e);
  }
  // The new file is in place; making the directory entry durable is best effort (some
  // filesystems refuse fsync on a directory), as there is no old file left to protect.
  const int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void append_line(const std::string& path, std::string_view line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot write", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path, "cannot write", e);
  }
  std::string l(line);
  l += '\n';
  const ssize_t w = ::write(fd, l.data(), l.size());
  if (w != ssize_t(l.size())) {
    const int e = w < 0 ? errno : ENOSPC;
    // Cut off a partial line (if another writer appended meanwhile, that is theirs to keep).
    if (w > 0) {
      struct stat now {};
      if (::fstat(fd, &now) == 0 && now.st_size == st.st_size + w)
        (void)::ftruncate(fd, st.st_size);
    }
    ::close(fd);
    fail(path, "write failed", e);
  }
  if (::close(fd) != 0) fail(path, "write failed", errno);
}

namespace {

// Closes the descriptor on every way out of read_regular_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": " + why);
}

std::string too_big(const std::string& size, uint64_t max_bytes, const char* what) {
  return size + ", more than the " + std::to_string(max_bytes) + " a " + what + " file may have";
}

}  // namespace

namespace {

// Opens path for reading after the checks read_regular_file documents; `size` is fstat's.
int open_regular(const std::string& path, uint64_t max_bytes, const char* what, uint64_t& size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. fstat on the open
  // descriptor (not stat on the name) so the checked file is the one read.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) {
    if (errno == ENOENT) refuse(path, "no such file");
    refuse(path, std::string("cannot open (") + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    refuse(path, std::string("cannot stat (") + std::strerror(errno) + ")");
  if (S_ISDIR(st.st_mode)) refuse(path, "is a directory, not a file");
  if (!S_ISREG(st.st_mode))
    refuse(path,
           "not a regular file (a FIFO, device or socket); give a " + std::string(what) + " file");
  size = uint64_t(st.st_size);
  if (size > max_bytes) refuse(path, too_big(std::to_string(size) + " bytes", max_bytes, what));
  const int fd = f.fd;
  f.fd = -1;
  return fd;
}

}  // namespace

void read_regular_file_blocks(const std::string& path, uint64_t max_bytes, const char* what,
                              size_t block_bytes,
                              const std::function<void(std::string_view)>& consume) {
  uint64_t size = 0;
  const Fd f{open_regular(path, max_bytes, what, size)};
  // Up to the size fstat gave: a file that grows meanwhile is read as it was. Size 0 is what
  // procfs and other generated files report whatever they hold: those are read to their end.
  const uint64_t limit = size > 0 ? size : max_bytes + 1;
  std::string buf(size_t(std::min<uint64_t>(block_bytes, limit)), '\0');
  uint64_t done = 0;
  while (done < limit) {
    const size_t want = size_t(std::min<uint64_t>(buf.size(), limit - done));
    const ssize_t r = ::read(f.fd, buf.data(), want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) refuse(path, std::string("read error (") + std::strerror(errno) + ")");
    if (r == 0) break;  // the end (or truncated meanwhile)
    done += uint64_t(r);
    if (done > max_bytes)
      refuse(path,
             "more than the " + std::to_string(max_bytes) + " bytes a " + what + " file may have");
    consume(std::string_view(buf.data(), size_t(r)));
  }
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what) {
  std::string out;
  read_regular_file_blocks(path, max_bytes, what, size_t(1) << 24,
                           [&](std::string_view b) { out.append(b); });
  return out;
}

void read_stream_blocks(std::istream& in, const std::string& name, uint64_t max_bytes,
                        size_t block_bytes, const std::function<void(std::string_view)>& consume) {
  std::string buf(block_bytes, '\0');
  uint64_t done = 0;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    const size_t got = size_t(in.gcount());
    done += got;
    if (done > max_bytes)
      refuse(name, "more than " + std::to_string(max_bytes) + " bytes; refused");
    if (got > 0) consume(std::string_view(buf.data(), got));
  }
  if (in.bad()) refuse(name, "read error");
}

std::string read_stream(std::istream& in, const std::string& name, uint64_t max_bytes) {
  std::string out;
  read_stream_blocks(in, name, max_bytes, size_t(1) << 16,
                     [&](std::string_view b) { out.append(b); });
  return out;
}

int remove_stale_temp_files(const std::string& path) {
  const std::string dir = parent_dir(path);
  const size_t slash = path.find_last_of('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    // write_file_atomic's names are PREFIX PID.N.R: leave a live writer's temp file alone.
    const std::string rest = name.substr(prefix.size());
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (end == rest.c_str() || *end != '.' || pid <= 0) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    if (::unlink((dir + "/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

namespace {

namespace fs = std::filesystem;

// Who a path is: device and inode when it exists, else its resolved directory and name.
struct FileKey {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;
  bool operator==(const FileKey& o) const {
    return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : name == o.name);
  }
};

FileKey key_of(const std::string& path) {
  FileKey k;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    k.exists = true, k.dev = st.st_dev, k.ino = st.st_ino;
    return k;
  }
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  const fs::path dir = fs::weakly_canonical(p.parent_path(), ec);
  k.name = ((ec ? p.parent_path() : dir) / p.filename()).lexically_normal().string();
  return k;
}

}  // namespace

std::string find_clobbered(const std::vector<NamedPath>& inputs,
                           const std::vector<NamedPath>& outputs) {
  auto skip = [](const NamedPath& p) { return p.path.empty() || p.path == "-"; };
  std::vector<FileKey> in_keys;
  for (const NamedPath& in : inputs) in_keys.push_back(skip(in) ? FileKey{} : key_of(in.path));
  std::vector<FileKey> out_keys;
  auto clash = [](const NamedPath& out, const NamedPath& other) {
    return out.role + " " + out.path + " is the same file as " + other.role + " " + other.path +
           " (refused: writing one would destroy the other)";
  };
  for (const NamedPath& out : outputs) {
    out_keys.push_back(skip(out) ? FileKey{} : key_of(out.path));
    if (skip(out)) continue;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!skip(inputs[i]) && in_keys[i] == out_keys.back()) return clash(out, inputs[i]);
    for (size_t j = 0; j + 1 < out_keys.size(); ++j)
      if (!skip(outputs[j]) && out_keys[j] == out_keys.back()) return clash(out, outputs[j]);
  }
  return "";
}

DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (fd_ < 0) return;
  // Removed while still locked: a run that opened this file meanwhile finds it gone (below).
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

bool DirLock::acquire(const std::string& dir, long& holder) {
  release();
  const std::string path = dir + "/" + kFileName;
  for (int attempt = 0; attempt < 16; ++attempt) {
    Fd f{::open(path.c_str(), O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644)};
    if (f.fd < 0) fail(dir, "cannot write", errno);
    struct stat mine {};
    if (::fstat(f.fd, &mine) != 0 || !S_ISREG(mine.st_mode))
      refuse(path, "not a regular file; remove it");
    if (::flock(f.fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) fail(path, "cannot lock", errno);
      char buf[32] = {};
      const ssize_t r = ::pread(f.fd, buf, sizeof buf - 1, 0);
      holder = r > 0 ? std::strtol(buf, nullptr, 10) : 0;
      return false;
    }
    // The previous holder removes the file on release: if it did so between our open and our
    // flock, the file we locked has no name any more, and the next run would lock a new one.
    struct stat named {};
    if (::stat(path.c_str(), &named) != 0 || named.st_ino != mine.st_ino ||
        named.st_dev != mine.st_dev)
      continue;
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(f.fd, 0) != 0 ||
        ::pwrite(f.fd, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
      fail(path, "cannot write", errno);
    fd_ = f.fd, path_ = path;
    f.fd = -1;
    return true;
  }
  fail(path, "cannot lock", EAGAIN);
}

}  // namespace tg
