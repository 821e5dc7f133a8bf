// Writing files without losing the old one: checkpoints, tokenizers, plots and logs all go
// through here, so a full disk, a missing directory or a crash mid-write leaves the previous
// file as it was.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace tg {

// Writes `bytes` to path atomically: a unique temp file in the same directory, fsync, rename
// over path, then fsync of the directory so the rename itself is on disk. On failure the previous
// file (if any) is untouched, the temp file is removed, and std::runtime_error says
// "PATH: reason". A path holding anything but a regular file (a directory, FIFO, device or
// socket) is refused before anything is written.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Appends `line` and a newline to path (created if missing) in one write() on an O_APPEND
// descriptor, so concurrent readers never see half a line. A short write (e.g. a full disk) is
// cut back off, leaving the file as it was, and throws std::runtime_error "PATH: reason".
void append_line(const std::string& path, std::string_view line);

// The whole of a regular file of at most max_bytes. Anything else is refused before a byte is
// read, with std::runtime_error "PATH: reason": a missing file, a directory, a FIFO, device or
// socket (opened with O_NONBLOCK, so a FIFO without a writer cannot block; /dev/zero cannot grow
// memory without bound), or a file larger than max_bytes (`what` names it: "text", ...).
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what);

// All of `in` (stdin), refused with std::runtime_error "NAME: more than max_bytes bytes" past
// the bound, so an endless stream fails instead of filling memory.
std::string read_stream(std::istream& in, const std::string& name, uint64_t max_bytes);

// Removes PATH.tmp.* files that write_file_atomic left when its process was killed mid-write
// (SIGKILL skips the clean-up). Only names of that form, in PATH's directory; best effort.
// Returns how many were removed.
int remove_stale_temp_files(const std::string& path);

}  // namespace tg
