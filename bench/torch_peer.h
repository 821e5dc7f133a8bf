// PyTorch as a benchmark's peer: where its interpreters are (/usr/bin/python3 with PyTorch 1.13,
// torch2-python's chroot with PyTorch 2.x), which kernels it should run beside a given path of
// ours, and which it does run (ATen's CPU capability, the BLAS it loaded and that BLAS's kernel
// set), read by a probe under the same environment as the measured children.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/child.h"
#include "bench/cli_args.h"
#include "bench/peer_env.h"
#include "core/kernels/kernels.h"
#include "core/tensor.h"

namespace bench {

struct TorchPeer {
  std::vector<std::string> launcher;  // the interpreter (and its arguments)
  std::string version;                // "torch 1.13.0a0"; empty: not available
  std::string why_not;                // why it is not
};

// torch2-python: TAPEGRAD_TORCH2_PYTHON when set, else shared/tools/ beside the source tree.
inline std::string torch2_python(const std::string& source_root) {
  const char* env = std::getenv("TAPEGRAD_TORCH2_PYTHON");
  return env && *env ? env : source_root + "/../shared/tools/torch2-python";
}

// The interpreter, if it runs and imports torch; `what` names it in why_not.
inline TorchPeer find_torch(std::vector<std::string> launcher, const std::string& what) {
  TorchPeer p;
  p.launcher = launcher;
  if (access(launcher[0].c_str(), X_OK) != 0) {
    p.why_not = what + ": " + launcher[0] + " not found";
    return p;
  }
  std::string out, err;
  long rss = 0;
  launcher.insert(launcher.end(), {"-c", "import torch; print(torch.__version__)"});
  if (!run_child(launcher, 1, out, rss, err) || out.empty()) {
    p.why_not = what + ": no torch there (" + (err.empty() ? "import failed" : err) + ")";
    return p;
  }
  p.version = "torch " + out.substr(0, out.find_first_of("\n+"));
  return p;
}

// PyTorch's kernels beside our path `isa`: on avx512, ATen's AVX-512 kernels (PyTorch 1.13 picks
// AVX2 by itself) and OpenBLAS's own choice; on avx2 where the CPU has AVX-512, ATen's AVX2 and
// OpenBLAS's Haswell kernels; on avx2 as the best path, the peers' own choice.
inline PeerEnv torch_env(const std::string& isa) {
  const std::vector<std::string> have = tg::kernels::available_isas();
  const bool has512 = std::find(have.begin(), have.end(), "avx512") != have.end();
  PeerEnv e;
  if (isa == "avx2" && has512) {
    peer_var(e, "ATEN_CPU_CAPABILITY", "avx2", "ATen's AVX2 kernels, as wide as our path");
    peer_var(e, "OPENBLAS_CORETYPE", "Haswell", "OpenBLAS's AVX2 kernels, as wide as our path");
    return e;
  }
  if (isa == "avx512" || isa == "avx512_bf16")  // avx512_bf16: avx512's float kernels
    peer_var(e, "ATEN_CPU_CAPABILITY", "avx512",
             "ATen's AVX-512 kernels, as wide as our path (PyTorch 1.x picks AVX2 by itself)");
  if (isa != "scalar")
    for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"})
      peer_var(e, name, nullptr, "it would hold OpenBLAS to other kernels than its best here");
  return e;
}

// What a probe process saw the peer load under `env`: "ATen AVX512, OpenBLAS SkylakeX
// (pthreads)", and the directory of an OpenMP build of that OpenBLAS (Debian's
// libopenblas0-openmp) when it runs the pthread build and one is installed beside it.
struct TorchKernels {
  std::string kernels, openmp_blas_dir;
};

inline TorchKernels torch_kernels(const TorchPeer& p, const PeerEnv& env) {
  static const char* probe = R"PY(
import ctypes, os, torch
cpu = getattr(torch.backends, "cpu", None)
cap = cpu.get_cpu_capability() if cpu is not None and hasattr(cpu, "get_cpu_capability") else None
for line in ([] if cap else torch.__config__.show().splitlines()):  # PyTorch 1.x
    if "CPU capability usage:" in line: cap = line.split(":", 1)[1].strip()
with open("/proc/self/maps") as f:
    libs = sorted({l.split()[-1] for l in f if "blas" in l.split()[-1].lower()})
blas, openmp = "BLAS " + (", ".join(os.path.basename(x) for x in libs) or "unknown"), "-"
for lib in libs:
    if "openblas" in lib:
        ob = ctypes.CDLL(lib)
        ob.openblas_get_corename.restype = ctypes.c_char_p
        ob.openblas_get_config.restype = ctypes.c_char_p
        threads = "OpenMP" if b"USE_OPENMP" in ob.openblas_get_config() else "pthreads"
        blas = "OpenBLAS %s (%s)" % (ob.openblas_get_corename().decode(), threads)
        other = os.path.join(os.path.dirname(os.path.dirname(lib)), "openblas-openmp")
        if threads == "pthreads" and os.path.exists(os.path.join(other, "libopenblas.so.0")):
            openmp = other
print(openmp)
print("ATen %s, %s" % (cap or "unknown", blas))
)PY";
  std::vector<std::string> args = p.launcher;
  args.insert(args.end(), {"-c", probe});
  std::string out, err;
  long rss = 0;
  if (!run_child(args, 1, out, rss, err, env.changes)) return {"unknown (" + err + ")", ""};
  TorchKernels k{last_line(out), ""};
  const std::string first = out.substr(0, out.find('\n'));
  if (first != "-" && first != k.kernels) k.openmp_blas_dir = first;
  return k;
}

// The peer's environment beside our path `isa` and the kernels it runs with it; on an AVX-512
// path, OpenBLAS on an AVX-512 kernel set even where it misdetects the CPU. ATen calls BLAS from
// inside its own OpenMP parallel regions (bmm, the flash attention kernel): OpenBLAS's pthread
// build then starts its threads on top of ATen's, and at 2 threads PyTorch 2.6's attention
// forward+backward ran 4x slower than with the OpenMP build, which runs nested calls on the
// calling thread. So the peer gets the OpenMP build when it is installed (libopenblas0-openmp),
// and the header says so either way.
inline PeerEnv torch_setup(const TorchPeer& p, const std::string& isa, std::string& kernels) {
  PeerEnv env = torch_env(isa);
  if (tg::huge_pages_enabled())
    peer_var(env, "THP_MEM_ALLOC_ENABLE", "1",
             "PyTorch's allocator (2.x) asks for transparent huge pages for big tensors, as ours "
             "does (TAPEGRAD_HUGE_PAGES=1)");
  TorchKernels k = torch_kernels(p, env);
  const size_t at = k.kernels.find("OpenBLAS ");
  if ((isa == "avx512" || isa == "avx512_bf16") && at != std::string::npos) {
    const std::string core = k.kernels.substr(at + 9, k.kernels.find(' ', at + 9) - at - 9);
    if (!openblas_avx512_core(core)) openblas_best_core(env, core);
  }
  if (!k.openmp_blas_dir.empty())
    peer_var(env, "LD_LIBRARY_PATH", k.openmp_blas_dir.c_str(),
             "OpenBLAS's OpenMP build: ATen calls BLAS inside its own OpenMP parallel regions, "
             "where the pthread build would start more threads than cores");
  else if (at != std::string::npos && k.kernels.find("(pthreads)") != std::string::npos)
    env.notes.push_back(
        "OpenBLAS's pthread build: BLAS calls inside ATen's parallel regions "
        "oversubscribe the cores above 1 thread (install libopenblas0-openmp)");
  kernels = torch_kernels(p, env).kernels;
  return env;
}

// A PyTorch peer as a benchmark uses it: where, its environment beside our path, its kernels.
struct Peer {
  TorchPeer torch;
  PeerEnv env;
  std::string kernels;  // what the probe saw it load
};

inline Peer find_peer(const std::string& launcher, const std::string& what,
                      const std::string& isa) {
  Peer p{find_torch({launcher}, what), {}, ""};
  if (!p.torch.version.empty()) p.env = torch_setup(p.torch, isa, p.kernels);
  return p;
}

// The PyTorch peer beside our path `isa`: torch_python's interpreter when given (without torch: a
// bad option), else PyTorch 2 where torch2_python finds it, else PyTorch 1.13; none (an empty
// version) with no_torch or when neither answers, with a note in `notes` saying why.
inline Peer choose_peer(const char* prog, const std::string& source_root, bool no_torch,
                        const std::string& torch_python, const std::string& isa,
                        std::vector<std::string>& notes) {
  if (no_torch) {
    notes.push_back("no PyTorch peer (--no-torch)");
    return {};
  }
  if (!torch_python.empty()) {
    Peer p = find_peer(torch_python, "--torch-python", isa);
    if (p.torch.version.empty()) bad_option(prog, p.torch.why_not);
    return p;
  }
  const std::pair<std::string, std::string> where[] = {
      {torch2_python(source_root), "PyTorch 2 (TAPEGRAD_TORCH2_PYTHON)"},
      {"/usr/bin/python3", "PyTorch 1.13"}};
  for (const auto& [launcher, what] : where) {
    Peer p = find_peer(launcher, what, isa);
    if (!p.torch.version.empty()) return p;
    notes.push_back("skipped " + p.torch.why_not);
  }
  return {};
}

// The peers' part of a --json header: [{"peer", "kernels", "env": [notes]}, ...], the missing
// ones left out.
inline std::string peers_json(const std::vector<Peer>& peers) {
  std::string s;
  for (const Peer& p : peers) {
    if (p.torch.version.empty()) continue;
    s += std::string(s.empty() ? "" : ", ") + "{\"peer\": " + tg::json::quote(p.torch.version) +
         ", \"kernels\": " + tg::json::quote(p.kernels) +
         ", \"env\": " + json_strings(p.env.notes) + "}";
  }
  return "[" + s + "]";
}

// The peers' lines of a table's header: version, interpreter, kernels, each environment note.
inline void print_peers(const std::vector<Peer>& peers) {
  for (const Peer& p : peers) {
    if (p.torch.version.empty()) continue;
    std::printf("peer: %s (%s): %s\n", p.torch.version.c_str(), p.torch.launcher[0].c_str(),
                p.kernels.c_str());
    for (const std::string& n : p.env.notes)
      std::printf("  %s: %s\n", p.torch.version.c_str(), n.c_str());
  }
}

// The text of a file of the source tree (a script or the book's classes), for a PyTorch peer: a
// chroot's python cannot see the tree, so they are passed as arguments. A missing file is one
// line naming it, exit status 1.
inline std::string source_text(const char* prog, const std::string& source_root,
                               const std::string& rel) {
  const std::string path = source_root + "/" + rel;
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "%s: cannot read %s\n", prog, path.c_str());
    std::exit(1);
  }
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

}  // namespace bench
