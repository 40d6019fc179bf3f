#!/usr/bin/python3
"""tiktoken's GPT-2 encoding (r50k_base) on the same file as build/bench_bpe: encode_ordinary and decode_bytes
in MB of text per second, one thread, the median of ROUNDS passes. Prints the ids' count too, which must equal
bench_bpe's for a valid UTF-8 file.
Run: python3 bench/tiktoken_bpe.py [FILE] [ROUNDS]   (pip install tiktoken; where tiktoken cannot fetch its
file, tests/gen_golden_bpe.py's way of filling its cache from examples/data/gpt2.tiktoken.gz is used)."""
import statistics
import sys
import time

sys.path.insert(0, "tests")
from gen_golden_bpe import encoding  # noqa: E402

path = sys.argv[1] if len(sys.argv) > 1 else "examples/data/coriolanus.txt"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
enc = encoding("examples/data/gpt2.tiktoken.gz")
text = open(path, encoding="utf-8").read()
nbytes = len(text.encode())
e, d = [], []
for _ in range(rounds):
    t0 = time.perf_counter()
    ids = enc.encode_ordinary(text)
    t1 = time.perf_counter()
    enc.decode_bytes(ids)
    t2 = time.perf_counter()
    e.append(nbytes / 1e6 / (t1 - t0))
    d.append(nbytes / 1e6 / (t2 - t1))
print("RESULT tiktoken %s file %s bytes %d tokens %d encode_MBps %.2f decode_MBps %.1f rounds %d"
      % (getattr(__import__("tiktoken"), "__version__", "?"), path, nbytes, len(ids), statistics.median(e),
         statistics.median(d), rounds))
