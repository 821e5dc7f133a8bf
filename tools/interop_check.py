"""Loads a tapegrad checkpoint into the book's PyTorch GPTModel and checks that the logits agree.

    /usr/bin/python3 tools/interop_check.py CHECKPOINT_DIR [--tapegrad BIN] [--prompt TEXT]

1. Parses CHECKPOINT_DIR/checkpoint.safetensors by hand (the format is 8 bytes of header length,
   a JSON header, raw little-endian data), so the safetensors package is not needed.
2. Builds the book's GPTModel from the checkpoint's config and loads the weights with
   load_state_dict(strict=True): every name must be the book's and every shape must fit.
3. Runs `tapegrad generate --logits FILE` on the prompt and compares its logits with PyTorch's
   on the same token ids: max |difference| must be below 1e-4.
4. Samples 20 tokens with the book's generate() (temperature 1.4, top-k 25, manual_seed(123))
   on both sides and reports whether the token ids agree (informational: near-ties in the
   sampling keys could flip a token even with agreeing logits).
Exit status 0 on agreement, 1 otherwise. Needs /usr/bin/python3 with torch; not part of make test.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "golden"))
from book_gpt import GPTModel, generate  # noqa: E402
from tapegrad_tokens import gpt2_decode  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        buf = bytearray(data[base + b:base + end])
        t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if buf else torch.empty(0)
        tensors[name] = t.reshape(e["shape"]).clone()
    return tensors, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "release", "train",
                                                       "tapegrad"))
    ap.add_argument("--prompt", default="Every effort moves you forward, and the")
    args = ap.parse_args()
    path = args.checkpoint
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.safetensors")
    tensors, meta = read_safetensors(path)
    cfg = json.loads(meta["config"])
    model = GPTModel(cfg)
    state = {k: v for k, v in tensors.items()
             if not k.startswith(("optimizer.", "tokenizer.", "trainer."))}
    model.load_state_dict(state, strict=True)  # the book's names, all of them
    model.eval()

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.safetensors")
        subprocess.run([args.tapegrad, "generate", "--checkpoint", path, "--prompt", args.prompt,
                        "--max-new-tokens", "0", "--logits", out], check=True,
                       capture_output=True)
        ours, ours_meta = read_safetensors(out)
        sampled = subprocess.run([args.tapegrad, "generate", "--checkpoint", path, "--prompt",
                                  args.prompt, "--max-new-tokens", "20", "--temperature", "1.4",
                                  "--top-k", "25", "--seed", "123", "--logits", out],
                                 check=True, capture_output=True)
    ids = torch.tensor([[int(x) for x in ours_meta["token_ids"].split()]])
    with torch.no_grad():
        theirs = model(ids)
    diff = (ours["logits"] - theirs).abs().max().item()
    print(f"{os.path.basename(os.path.dirname(path)) or path}: config {cfg}")
    print(f"loaded {len(state)} tensors into the book's GPTModel (strict); "
          f"{ids.shape[1]} prompt tokens, logits {tuple(theirs.shape)}")
    if meta.get("tokenizer") == "gpt2":
        torch.manual_seed(123)
        ref_ids = generate(model, ids, 20, cfg["context_length"], temperature=1.4, top_k=25)
        ref_text = gpt2_decode(ref_ids[0].tolist(), args.tapegrad)
        ours_text = sampled.stdout.decode("utf-8", errors="replace").rstrip("\n")
        same = ref_text == ours_text
        print(f"generate(T=1.4, top_k=25, seed 123): {'same text' if same else 'DIFFERENT'}")
        print(f"  tapegrad: {ours_text!r}\n  PyTorch:  {ref_text!r}")
    else:
        print("generate: not compared (the text comparison decodes with GPT-2's tokenizer)")
    print(f"max |logits(tapegrad) - logits(PyTorch)| = {diff:.3g}  "
          f"({'OK' if diff < 1e-4 else 'MISMATCH'}, tolerance 1e-4)")
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
