// Writing files without losing the old one: checkpoints, tokenizers, plots and logs all go
// through here, so a full disk, a missing directory or a crash mid-write leaves the previous
// file as it was.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace tg {

// Writes `bytes` to path atomically: a unique temp file in the same directory, fsync, rename
// over path, then fsync of the directory so the rename itself is on disk. On failure the previous
// file (if any) is untouched, the temp file is removed, and std::runtime_error says
// "PATH: reason". A path holding anything but a regular file (a directory, FIFO, device or
// socket) is refused before anything is written.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The same for a file made of pieces, written in order from where they lie (writev), so a
// checkpoint's tensors reach the file from their own storage with no second copy of the model.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

// Appends `line` and a newline to path (created if missing) in one write() on an O_APPEND
// descriptor, so concurrent readers never see half a line. A short write (e.g. a full disk) is
// cut back off, leaving the file as it was, and throws std::runtime_error "PATH: reason".
void append_line(const std::string& path, std::string_view line);

// Throws what write_file_atomic(path, ...) would throw for a reason other than the data, without
// writing path: anything but a regular file there, or a directory that takes no new file (read
// only, /proc, missing). Probes with a temp file of write_file_atomic's form, removed at once.
void check_writable(const std::string& path);

// A file a command reads or writes, as the user named it: role "-o", "--log", "the text", ...
struct NamedPath {
  std::string path, role;
};

// Outputs that would destroy an input or each other, found before anything is written: the
// first output that is the same file as an input or an earlier output, as "ROLE PATH is the
// same file as ROLE PATH"; empty when there is none. Existing files are compared by device and
// inode (a symlink or another spelling of the name is the same file), a name not there yet by
// its resolved directory and last component. Empty paths and "-" (stdin, stdout) are skipped.
std::string find_clobbered(const std::vector<NamedPath>& inputs,
                           const std::vector<NamedPath>& outputs);

// Holds an exclusive flock(2) on DIR/tapegrad.lock, which names the holder's PID, for its
// lifetime: one run per output folder. The kernel drops the lock when its holder dies, so a lock
// file left by a killed run does not block. The file is removed on release.
class DirLock {
 public:
  DirLock() = default;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();
  // False when another process holds the lock (its PID in `holder`, 0 if unknown); throws
  // std::runtime_error "DIR: cannot write (reason)" when the lock file cannot be made.
  bool acquire(const std::string& dir, long& holder);
  void release();
  static constexpr const char* kFileName = "tapegrad.lock";

 private:
  int fd_ = -1;
  std::string path_;
};

// The whole of a regular file of at most max_bytes. Anything else is refused before a byte is
// read, with std::runtime_error "PATH: reason": a missing file, a directory, a FIFO, device or
// socket (opened with O_NONBLOCK, so a FIFO without a writer cannot block; /dev/zero cannot grow
// memory without bound), or a file larger than max_bytes (`what` names it: "text", ...).
// A file whose stat size is 0 (procfs: /proc/self/status) is read to its end.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what);

// The same checks and bound, with the file handed to `consume` in pieces of at most block_bytes
// (in order), so a caller that streams holds one block, not the file.
void read_regular_file_blocks(const std::string& path, uint64_t max_bytes, const char* what,
                              size_t block_bytes,
                              const std::function<void(std::string_view)>& consume);

// All of `in` (stdin), refused with std::runtime_error "NAME: more than max_bytes bytes" past
// the bound, so an endless stream fails instead of filling memory.
std::string read_stream(std::istream& in, const std::string& name, uint64_t max_bytes);
void read_stream_blocks(std::istream& in, const std::string& name, uint64_t max_bytes,
                        size_t block_bytes, const std::function<void(std::string_view)>& consume);

// Removes PATH.tmp.* files that write_file_atomic left when its process was killed mid-write
// (SIGKILL skips the clean-up). Only names of that form, in PATH's directory; best effort.
// Returns how many were removed.
int remove_stale_temp_files(const std::string& path);

}  // namespace tg
