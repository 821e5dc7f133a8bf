// See file_io.h.
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>

namespace tg {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw std::runtime_error(path + ": " + what + " (" + std::strerror(err) + ")");
}

// write() until done; false with errno set on an error (EINTR retried).
bool write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    done += size_t(w);
  }
  return true;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  // A unique name per call, so two writers (or a crashed earlier run) never share a temp file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter++) + "." + std::to_string(std::random_device{}());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot write", errno);
  if (!write_all(fd, bytes) || ::fsync(fd) != 0) {
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

}  // namespace tg
