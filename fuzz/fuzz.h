// Shared by the libFuzzer harnesses in fuzz/. Each harness defines its entry point with
// TG_FUZZ_ENTRY(name): with libFuzzer (make fuzz) that is LLVMFuzzerTestOneInput; in the normal
// builds (TG_FUZZ_REPLAY) it is tg_fuzz_<name>, which tests/test_fuzz_replay.cpp calls once per
// committed corpus file, so `make test` replays every corpus under g++, release and ASan alike.
//
// A harness returns normally for any input the code refuses with an exception (that is the
// promise: bad input is an error, not a crash); a crash, a sanitizer report, a leak, a hang or a
// TG_FUZZ_CHECK failure is a finding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#ifdef TG_FUZZ_REPLAY
#define TG_FUZZ_ENTRY(name) int tg_fuzz_##name(const uint8_t* data, size_t size)
#else
#define TG_FUZZ_ENTRY(name) extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#endif

// An invariant the harness checks beyond "no crash": prints it and aborts (a finding).
#define TG_FUZZ_CHECK(cond)                                                                 \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: TG_FUZZ_CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

namespace tg::fuzz {

// The loaders read paths, so each input goes to a file in a private directory (made once per
// process, under $TMPDIR or /tmp) and the loader reads it back, as it would a user's file.
std::string write_temp(const std::string& name, std::string_view bytes);

// Splits data at '\0' bytes (argv-like); the pieces are strings without NUL.
std::vector<std::string> split_nul(std::string_view data);

}  // namespace tg::fuzz
