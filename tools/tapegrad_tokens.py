"""GPT-2 token ids through `tapegrad tokenize` (checked equal to tiktoken by test_tokenizer), so
the PyTorch-side scripts need neither tiktoken nor its files."""
import subprocess


def gpt2_encode(text, tapegrad):
    out = subprocess.run([tapegrad, "tokenize", "--encoding", "gpt2", "-"], input=text.encode(),
                         capture_output=True, check=True)
    return [int(x) for x in out.stdout.split()]


def gpt2_decode(ids, tapegrad):
    out = subprocess.run([tapegrad, "tokenize", "--encoding", "gpt2", "--decode", "-"],
                         input=" ".join(map(str, ids)).encode(), capture_output=True, check=True)
    return out.stdout.decode("utf-8", errors="replace")
