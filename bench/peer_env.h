// A peer's environment for one child: what a benchmark sets or removes so that a peer (OpenBLAS,
// oneDNN, PyTorch) runs the kernels it should face, each change with a note saying why, for the
// header. A user's variable is never changed silently.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/child.h"

namespace bench {

// What a path's child runs with: the peers' environment changes and, for the header, each one
// with why. A variable the user set is changed only when it would put a peer on other kernels
// than the ones it should face, and the header says so.
struct PeerEnv {
  std::vector<bench::EnvChange> changes;
  std::vector<std::string> notes;
};

// Sets name to value for the peers (noting a different value the user had), or, with no value,
// removes the user's setting (noting it); `why` ends the note.
inline void peer_var(PeerEnv& e, const std::string& name, const char* value,
                     const std::string& why) {
  const char* user = std::getenv(name.c_str());
  if (value == nullptr) {
    if (user == nullptr) return;
    e.changes.push_back({name, std::nullopt});
    e.notes.push_back(name + "=" + user + " from the environment removed for the peers: " + why);
  } else if (user != nullptr && std::string(user) == value) {
    e.notes.push_back(name + "=" + user + " kept from the environment: " + why);
  } else {
    e.changes.push_back({name, std::string(value)});
    e.notes.push_back(name + "=" + value +
                      (user ? std::string(" (the environment had ") + user + ")" : "") + ": " +
                      why);
  }
}

// OpenBLAS's AVX-512 kernel sets (0.3.21's names).
inline bool openblas_avx512_core(const std::string& core) {
  return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
}

// On an AVX-512 path where OpenBLAS, left to detect the CPU itself, chose `detected` (not an
// AVX-512 set: older builds misdetect newer CPUs), its best core this build has instead.
inline void openblas_best_core(PeerEnv& e, const std::string& detected) {
  e.changes.push_back({"OPENBLAS_CORETYPE", std::string("SkylakeX")});
  e.notes.push_back("OPENBLAS_CORETYPE=SkylakeX: OpenBLAS detected " + detected +
                    " by itself, not an AVX-512 kernel set; SkylakeX is its build's AVX-512 one");
}

}  // namespace bench
