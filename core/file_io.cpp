// See file_io.h.
#include "core/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <istream>
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
  // Only a regular file (or nothing) is replaced: renaming over a device (/dev/null, /dev/full),
  // a FIFO or a socket would swap the node itself for a regular file, which as root succeeds.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error(path + (S_ISDIR(st.st_mode)
                                         ? ": is a directory, not a file"
                                         : ": not a regular file (a FIFO, device or socket); "
                                           "only a regular file is replaced"));
  // A writer killed by SIGKILL (no clean-up) left its temp file: this run removes it.
  remove_stale_temp_files(path);
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

}  // namespace

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. fstat on the open
  // descriptor (not stat on the name) so the checked file is the one read.
  const Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
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
  if (uint64_t(st.st_size) > max_bytes)
    refuse(path, std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
                     " a " + what + " file may have");
  std::string out(size_t(st.st_size), '\0');
  size_t done = 0;
  // Up to the size fstat gave; a file that grows meanwhile is read as it was.
  while (done < out.size()) {
    const ssize_t r = ::read(f.fd, out.data() + done, out.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) refuse(path, std::string("read error (") + std::strerror(errno) + ")");
    if (r == 0) break;  // truncated meanwhile
    done += size_t(r);
  }
  out.resize(done);
  return out;
}

std::string read_stream(std::istream& in, const std::string& name, uint64_t max_bytes) {
  std::string out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    out.append(buf, size_t(in.gcount()));
    if (out.size() > max_bytes)
      refuse(name, "more than " + std::to_string(max_bytes) + " bytes; refused");
  }
  if (in.bad()) refuse(name, "read error");
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

}  // namespace tg
