#!/usr/bin/python3
"""sentencepiece on the same file and model as `build/bench_bpe FILE ROUNDS MODEL`: encode (ids) and decode in MB
of text per second, one thread, the median of ROUNDS passes, the text encoded whole. Prints the ids' count too,
which must equal bench_bpe's for a valid UTF-8 file.
Run: python3 bench/spm_bpe.py FILE [ROUNDS] [MODEL]   (pip install sentencepiece; MODEL default
tests/golden/spm_bpe.model)."""
import statistics
import sys
import time

import sentencepiece as spm

path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
sp = spm.SentencePieceProcessor(model_file=sys.argv[3] if len(sys.argv) > 3 else "tests/golden/spm_bpe.model")
with open(path, encoding="utf-8") as f:
    text = f.read()
n = len(text.encode())
enc, dec = [], []
for _ in range(rounds):
    t0 = time.perf_counter()
    ids = sp.encode(text)
    t1 = time.perf_counter()
    sp.decode(ids)
    t2 = time.perf_counter()
    enc.append(n / 1e6 / (t1 - t0))
    dec.append(n / 1e6 / (t2 - t1))
print("RESULT sentencepiece %s file %s bytes %d tokens %d encode_MBps %.2f decode_MBps %.1f rounds %d"
      % (spm.__version__, path, n, len(ids), statistics.median(enc), statistics.median(dec), rounds))
