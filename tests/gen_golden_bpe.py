#!/usr/bin/python3
"""Golden token ids for tests/test_bpe.c from tiktoken's GPT-2 encoding (r50k_base: the GPT-2 ranks and regex).

Writes tests/golden/bpe_golden.h: for each test text its bytes and the ids tiktoken gives them.
Run: python3 tests/gen_golden_bpe.py examples/data/gpt2.tiktoken.gz > tests/golden/bpe_golden.h
(pip install tiktoken). tiktoken fetches r50k_base.tiktoken from the network at first use; where that is
blocked, the committed vocabulary is put in tiktoken's cache under the name tiktoken looks for, and tiktoken
checks its SHA-256 against the hash it expects for r50k_base, so the ids come from tiktoken's own definition
of the encoding (ranks, regex and special token) whatever the cache holds.

Texts that are not valid UTF-8 (tiktoken encodes str): fsc splits the bytes into maximal runs of valid UTF-8
and runs of bytes that begin no valid character; a valid run is encoded as text (encode_ordinary), an
invalid run as one piece (tiktoken's _encode_single_piece: the byte-level BPE of those bytes alone).
This script applies the same rule with tiktoken, so for a valid text the ids are exactly tiktoken's.
"""
import gzip
import hashlib
import os
import sys
import tempfile

import tiktoken

R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"

TEXTS = [
    b"Hello world",
    b"",
    b"First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
    b"The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see--won't we?",
    b"I'm sure they've said you'd go, but we're not, he'll've... 'S 'T 'RE",
    b"int main(void) {\n    for (int i = 0; i < 10; i++) printf(\"%d\\n\", i);\n    return 0;\n}\n",
    b"def f(x):\n\tif x:\n\t\treturn [x ** 2 for _ in range(3)]  # comment\n",
    b"12345 678901 3.14159 1e-10 0x1F 2,147,483,647 -42",
    b"   leading spaces, two  spaces,   three,\n\n\nnewlines \t tab\r\nCRLF   ",
    b"trailing spaces   ",
    b" \n \n  \n",
    b"emoji: \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 flags \xf0\x9f\x87\xab\xf0\x9f\x87\xb7",
    "中文分词测试：今天天气很好。日本語のテキスト、カタカナ。한국어 문장입니다.".encode(),
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 \u1e9b\u0323 Zalgo: Z\u0351\u036b\u0343a\u0310\u0337l\u0303g\u0301o".encode(),
    "Ελληνικά και русский текст, עברית, العربية ١٢٣ ٤٥٦, हिन्दी ०१२".encode(),
    "Unicode spaces:\u00a0nbsp\u2003em\u3000ideographic\u0085nel\u2028ls\x1cfs \u200bzw".encode(),
    "x \u180ey \u180e\u180e x \u0085y \u00a0z \u3000w \x1cv \u2028u\u0085\u0085 t \x1c\x1c s\t\u00a0\n".encode(),
    "Numbers of other scripts: \u2167 \u00bd \u2460 \uff11\uff12 superscript\u00b2".encode(),
    b"<|endoftext|> is text here, not the special token",
    b"Mixed: caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xe2\x82\xac100 \xc2\xa3 \xc2\xa5",
    b"invalid \xff\xfe bytes \x80 here \xc3( and \xe2\x82 cut",
    b"\xed\xa0\x80 surrogate, \xc0\xaf overlong, \xf4\x90\x80\x80 too large",
    b"tail \xf0\x9f\x98",
    b"\x00\x01\x02 control \x7f bytes\x1b[0m",
    b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    b"                                                                                                 x",
    b"!!!!!!!!????????........,,,,,,;;;;;;::::::------======",
    b"https://example.com/path?query=1&b=2#frag user@example.org",
    b"\xe2\x80\x9cSmart quotes\xe2\x80\x9d and \xe2\x80\x98single\xe2\x80\x99 \xe2\x80\x94 dashes \xe2\x80\x93 ellipsis\xe2\x80\xa6",
]


def encoding(vocab_gz):
    """tiktoken's r50k_base, its file taken from the committed vocabulary when the cache lacks it."""
    raw = gzip.open(vocab_gz).read()
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or tempfile.mkdtemp(prefix="tiktoken-")
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    path = os.path.join(cache, hashlib.sha1(R50K_URL.encode()).hexdigest())
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(raw)
    return tiktoken.get_encoding("r50k_base")


def runs(b):
    """Maximal runs of valid UTF-8 (True, bytes) and of bytes that begin no valid character (False, bytes)."""
    out, i = [], 0
    while i < len(b):
        n = 0
        for k in (1, 2, 3, 4):
            try:
                if len(b[i:i + k].decode("utf-8")) == 1 and i + k <= len(b):
                    n = k
                    break
            except UnicodeDecodeError:
                pass
        valid, step = (n > 0), (n or 1)
        if out and out[-1][0] == valid:
            out[-1] = (valid, out[-1][1] + b[i:i + step])
        else:
            out.append((valid, b[i:i + step]))
        i += step
    return out


def encode(enc, b):
    ids = []
    for valid, run in runs(b):
        ids += enc.encode_ordinary(run.decode("utf-8")) if valid else enc._encode_single_piece(run)
    return ids


def c_bytes(b):
    return '"' + "".join(chr(c) if 32 <= c < 127 and c not in (34, 92, 63) else "\\%03o" % c for c in b) + '"'


def main():
    enc = encoding(sys.argv[1] if len(sys.argv) > 1 else "examples/data/gpt2.tiktoken.gz")
    assert enc.n_vocab == 50257 and enc.eot_token == 50256
    print("/* Generated by tests/gen_golden_bpe.py with tiktoken %s (r50k_base, GPT-2). Do not edit. */" % tiktoken.__version__)
    print("typedef struct { const char *text; size_t len; size_t n; const int32_t *ids; } bpe_gold;")
    for i, t in enumerate(TEXTS):
        ids = encode(enc, t)
        assert enc.decode_bytes(ids) == t
        print("static const int32_t bpe_gold_ids%d[] = {%s};" % (i, ", ".join(map(str, ids)) or "0"))
    print("static const bpe_gold bpe_golds[] = {")
    for i, t in enumerate(TEXTS):
        print("    {%s, %d, %d, bpe_gold_ids%d}," % (c_bytes(t), len(t), len(encode(enc, t)), i))
    print("};")


if __name__ == "__main__":
    main()
