#!/usr/bin/python3
"""A small sentencepiece BPE model with Llama 2's settings and golden ids for tests/test_spm.c.

  python3 tests/gen_golden_spm.py --train      # trains tests/golden/spm_bpe.model from docs/*.md, then the ids
  python3 tests/gen_golden_spm.py              # the ids of the committed model

Writes tests/golden/spm_golden.h: for each test text its bytes, the ids sentencepiece's encode gives them and
the bytes its decode gives those ids back. Needs `pip install sentencepiece` (run with 0.2.x); the test does not.
The model: model_type=bpe, byte_fallback, identity normalization, add_dummy_prefix, no removal of extra
whitespace, digits split, whitespace-only pieces allowed (Llama 2's trainer settings), a vocabulary of 800 and
one user-defined piece ("fsc_bpe", to check that such a piece is kept whole).
Texts that are not valid UTF-8 are given to sentencepiece as bytes (it reads each stray byte as U+FFFD).
"""
import glob
import os
import sys

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(HERE, "golden", "spm_bpe.model")
OUT = os.path.join(HERE, "golden", "spm_golden.h")

TEXTS = [
    b"Hello world",
    b"",
    b" ",
    b"   ",
    b"a",
    b"First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
    b"The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see--won't we?",
    b"int main(void) {\n    for (int i = 0; i < 10; i++) printf(\"%d\\n\", i);\n    return 0;\n}\n",
    b"def f(x):\n\tif x:\n\t\treturn [x ** 2 for _ in range(3)]  # comment\n",
    b"12345 678901 3.14159 1e-10 0x1F 2,147,483,647 -42",
    b"   leading spaces, two  spaces,   three,\n\n\nnewlines \t tab\r\nCRLF   ",
    b"trailing spaces   ",
    b" \n \n  \n",
    b"\nstarts with a newline",
    b"emoji: \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 flags \xf0\x9f\x87\xab\xf0\x9f\x87\xb7",
    "\U0001F600 starts with an emoji".encode(),
    "中文分词测试：今天天气很好。日本語のテキスト、カタカナ。한국어 문장입니다.".encode(),
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 Zalgo: Z\u0351\u036b\u0343a\u0310\u0337l\u0303g\u0301o".encode(),
    "Ελληνικά και русский текст, עברית, العربية ١٢٣, हिन्दी ०१२".encode(),
    "Unicode spaces:\u00a0nbsp\u2003em\u3000ideographic\u2028ls \u200bzw".encode(),
    "the piece \u2581 itself, \u2581\u2581 twice, and \u2047 and \ufffd".encode(),
    b"<s> and </s> and <unk> and <0x41> are text here",
    b"fsc_bpe is a user-defined piece: fsc_bpe_encode, xfsc_bpe, fsc_bp",
    b"The tokenizer reads tokenizer.model files; the trainer writes checkpoints.",
    b"invalid \xff\xfe bytes \x80 here \xc3( and \xe2\x82 cut",
    b"tail \xf0\x9f\x98",
    b"\x00\x01\x02 control \x7f bytes\x1b[0m",
    b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    b"                                                                                                 x",
    b"!!!!!!!!????????........,,,,,,;;;;;;::::::------======",
    b"https://example.com/path?query=1&b=2#frag user@example.org",
    b"\xe2\x80\x9cSmart quotes\xe2\x80\x9d and \xe2\x80\x98single\xe2\x80\x99 \xe2\x80\x94 dashes \xe2\x80\x93 ellipsis\xe2\x80\xa6",
]


def train():
    text = ""
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            text += f.read()
    corpus = os.path.join(HERE, "golden", "spm_corpus.tmp")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=MODEL[:-len(".model")], model_type="bpe", vocab_size=800,
            byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True,
            remove_extra_whitespaces=False, split_digits=True, allow_whitespace_only_pieces=True,
            character_coverage=0.9995, user_defined_symbols=["fsc_bpe"], num_threads=1, minloglevel=2)
    finally:
        os.remove(corpus)
        vocab = MODEL[:-len(".model")] + ".vocab"
        if os.path.exists(vocab):
            os.remove(vocab)


def c_bytes(b):
    out = '"'
    for c in b:
        out += "\\%03o" % c if c < 32 or c >= 127 or c in (34, 63, 92) else chr(c)
    return out + '"'


def main():
    if "--train" in sys.argv[1:]:
        train()
    sp = spm.SentencePieceProcessor(model_file=MODEL)
    lines = ["/* Made by tests/gen_golden_spm.py with sentencepiece %s from tests/golden/spm_bpe.model: each text,"
             % spm.__version__,
             " * sentencepiece's ids for it and its decode of those ids. Do not edit. */",
             "#include <stddef.h>", "#include <stdint.h>", "",
             "typedef struct {", "    const char *text;", "    size_t len;", "    const int32_t *ids;", "    size_t n;",
             "    const char *decoded;", "    size_t dlen;", "} spm_gold;", ""]
    rows = []
    for i, t in enumerate(TEXTS):
        try:
            ids = sp.encode(t.decode("utf-8"))
        except UnicodeDecodeError:
            ids = sp.encode(t)  # bytes: sentencepiece reads them as they are
        dec = sp.decode(ids).encode("utf-8")
        lines.append("static const int32_t spm_ids_%d[] = {%s};" % (i, ", ".join(map(str, ids)) or "0"))
        rows.append("    {%s, %d, spm_ids_%d, %d, %s, %d}," % (c_bytes(t), len(t), i, len(ids), c_bytes(dec), len(dec)))
    lines += ["", "static const spm_gold spm_golds[] = {"] + rows + ["};", ""]
    lines.insert(5, "#define SPM_VOCAB %d" % sp.get_piece_size())
    lines.insert(6, "#define SPM_BOS %d" % sp.bos_id())
    with open(OUT, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
