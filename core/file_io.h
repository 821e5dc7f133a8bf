// Writing files without losing the old one: checkpoints, tokenizers, plots and logs all go
// through here, so a full disk, a missing directory or a crash mid-write leaves the previous
// file as it was.
#pragma once
#include <string>
#include <string_view>

namespace tg {

// Writes `bytes` to path atomically: a unique temp file in the same directory, fsync, rename
// over path, then fsync of the directory so the rename itself is on disk. On failure the previous
// file (if any) is untouched, the temp file is removed, and std::runtime_error says
// "PATH: reason".
void write_file_atomic(const std::string& path, std::string_view bytes);

// Appends `line` and a newline to path (created if missing) in one write() on an O_APPEND
// descriptor, so concurrent readers never see half a line. A short write (e.g. a full disk) is
// cut back off, leaving the file as it was, and throws std::runtime_error "PATH: reason".
void append_line(const std::string& path, std::string_view line);

}  // namespace tg
