"""bench_attention --notebook's PyTorch side: one of the bonus notebook's implementations, its own
class from its own cells, timed forward and forward+backward as the notebook's sections 10-11 do.

The notebook is rasbt/LLMs-from-scratch @28c65cdfbc, ch03/02_bonus_efficient-multihead-attention/
mha-implementations.ipynb. PyTorch 2's chroot cannot see the source tree or the notebook, so the
benchmark runs this file with `python -c` and passes the rest as arguments:
    IMPL BATCH CONTEXT_LEN EMBED_DIM NUM_HEADS THREADS REPS DEFS CELLS
DEFS is the text of tests/golden/notebook_defs.py (exec'd here), CELLS a JSON list of the
notebook's code cells (the benchmark reads them from its --notebook-file). Prints one line:
    best forward ms, best forward+backward ms, sum of the output, RSS in KB once everything exists

As the notebook: torch.manual_seed(123), then embeddings = randn(batch, context_len, embed_dim)
(cell 3), then the module with the notebook's arguments (dropout 0, qkv_bias False); embeddings
needs no gradient; forward+backward is output.sum().backward() (section 11.3). Each of them runs
once untimed first (the notebook warms up five times); each timed run starts with zero_grad().

Not here: the notebook's GPU paths, torch.compile (its section 11.4), its mean and std over many
runs (the best of REPS instead, as every benchmark of tapegrad reports).
"""
import json
import resource
import sys
import time

import torch

impl = sys.argv[1]
B, T, D, H, threads, reps = (int(a) for a in sys.argv[2:8])
torch.set_num_threads(threads)
defs = {}
exec(sys.argv[8], defs)
nb = defs["definitions"](json.loads(sys.argv[9]))

# The notebook's cell 30 imports these only when CUDA is available; PyTorch 2.6 runs them on the
# CPU too, eagerly (without torch.compile, flex_attention is its reference implementation, which
# materialises the scores).
if impl == "MHAPyTorchFlexAttention":
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    nb.flex_attention, nb.create_block_mask = flex_attention, create_block_mask

# The notebook's instantiations (sections 1-9): keyword arguments as its cells write them.
args = dict(d_in=D, d_out=D, context_length=T, dropout=0.0, num_heads=H, qkv_bias=False)
modules = {
    "Ch03_MHA_Wrapper": lambda: nb.Ch03_MHA_Wrapper(**dict(args, d_out=D // H)),
    "Ch03_MHA": lambda: nb.Ch03_MHA(**args),
    "MultiHeadAttentionCombinedQKV": lambda: nb.MultiHeadAttentionCombinedQKV(**args),
    "MHAEinsum": lambda: nb.MHAEinsum(**args),
    "MHAPyTorchScaledDotProduct": lambda: nb.MHAPyTorchScaledDotProduct(**args),
    "MHAPyTorchSDPAWithoutFlash": lambda: nb.MHAPyTorchSDPAWithoutFlash(**args),
    "MHAPyTorchClass": lambda: nb.MHAPyTorchClass(**args),
    "MHAPyTorchClass need_weights=False": lambda: nb.MHAPyTorchClass(**args, need_weights=False),
    "MHAPyTorchFlexAttention": lambda: nb.MHAPyTorchFlexAttention(**args),
}
torch.manual_seed(123)
embeddings = torch.randn((B, T, D))
m = modules[impl]()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def forward_backward():
    m.zero_grad()
    m(embeddings).sum().backward()


def best_ms(fn):
    fn()  # warm-up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


fwd = best_ms(lambda: m(embeddings))
fwd_bwd = best_ms(forward_backward)
with torch.no_grad():
    checksum = m(embeddings).double().sum().item()
print("%.3f %.3f %.9g %d" % (fwd, fwd_bwd, checksum, base))
