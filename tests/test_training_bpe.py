"""The BPE tokenizer option (``mxref train --tokenizer bpe --vocab-size N``,
mxkernels/training/tokenizer.py): deterministic vocabulary bytes, exact round trip, byte
accounting for nats/byte, cache, typed refusals.

The corpus is a small directory of stdlib modules (plus one Latin-1 file, which is not UTF-8)
so that a tokenizer trains in well under a second.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from mxkernels.training.data import load_corpus, val_batches
from mxkernels.training.errors import DataError, TrainingConfigError
from mxkernels.training.tokenizer import (BPETokenizer, bytes_to_unicode, split_documents,
                                          train_bpe)
from mxkernels.training.trainer import TrainConfig, tokens_per_byte, train

REPO = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ["json/__init__.py", "json/decoder.py", "json/encoder.py", "json/scanner.py",
         "textwrap.py", "string.py", "shlex.py", "fnmatch.py", "glob.py", "bisect.py",
         "heapq.py", "colorsys.py", "keyword.py", "numbers.py", "abc.py", "this.py"]
VAL_FRACTION = 0.3


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe_corpus")
    for f in FILES:
        shutil.copy(STDLIB / f, d / f.replace("/", "_"))
    # one document that is not UTF-8: decoded with U+FFFD and counted
    (d / "latin1.txt").write_bytes("caf\xe9 na\xefve r\xe9sum\xe9\n".encode("latin-1") * 40)
    c = load_corpus(str(d), VAL_FRACTION)
    assert c.info["val_documents"] >= 2 and c.n_documents - c.info["val_documents"] >= 10
    return d


def _train_in_subprocess(corpus: Path, vocab: int, out: Path) -> bytes:
    code = ("import sys; from mxkernels.training.data import load_corpus; "
            "from mxkernels.training.tokenizer import split_documents, train_bpe; "
            f"c = load_corpus({str(corpus)!r}, {VAL_FRACTION}); "
            "docs, _ = split_documents(c.train); "
            f"open({str(out)!r}, 'wb').write(train_bpe(docs, {vocab}).json_bytes)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONHASHSEED", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return out.read_bytes()


def test_training_twice_gives_identical_vocabulary_bytes(corpus_dir, tmp_path):
    # two processes: Rust's hash maps are seeded per process, so this is the real question
    a = _train_in_subprocess(corpus_dir, 600, tmp_path / "a.json")
    b = _train_in_subprocess(corpus_dir, 600, tmp_path / "b.json")
    assert a == b
    docs, _ = split_documents(load_corpus(str(corpus_dir), VAL_FRACTION).train)
    assert train_bpe(docs, 600).json_bytes == a          # and in this process
    assert train_bpe(docs, 601).json_bytes != a          # the settings are in the bytes
    tk = BPETokenizer.from_json_bytes(a)
    assert tk.vocab_size == 600 and tk.tok.id_to_token(0) == "<|doc|>"
    # ids 1..256: the 256 byte symbols, so every byte string is encodable
    assert {tk.tok.id_to_token(i) for i in range(1, 257)} == set(bytes_to_unicode().values())


def test_round_trip_on_the_corpus(corpus_dir):
    c = load_corpus(str(corpus_dir), VAL_FRACTION)
    train_docs, replaced = split_documents(c.train)
    val_docs, replaced_v = split_documents(c.val)
    assert replaced + replaced_v == 1                   # the Latin-1 file
    tk = train_bpe(train_docs, 700)
    all_docs = train_docs + val_docs
    ids = tk.encode(all_docs)
    n_tok = sum(map(len, ids))
    n_bytes = sum(len(d.encode()) for d in all_docs)
    assert n_tok < 0.6 * n_bytes                        # it does merge
    for d, i in zip(all_docs, ids):
        assert tk.decode_bytes(i) == d.encode("utf-8")  # our byte table
        assert tk.tok.decode(i) == d                    # the library's ByteLevel decoder
        assert int(tk.token_bytes[i].sum()) == len(d.encode("utf-8"))
    # valid UTF-8 documents: the stream is the corpus bytes themselves
    ok = [d for d in c.train.tobytes().split(b"\0")[:-1] if d.decode("utf-8", "replace") ==
          d.decode("utf-8", "ignore")]
    assert len(ok) >= 10
    for d in ok:
        assert tk.decode_bytes(tk.encode([d.decode()])[0]) == d


def test_nats_per_byte_accounting(corpus_dir, tmp_path):
    runs = tmp_path / "runs"
    kw = dict(model="llama-tiny", seq_len=32, batch_size=4, precision="fp32", threads=1,
              eval_tokens=512, progress=False, lr=3e-3, tokens=256, corpus=str(corpus_dir),
              val_fraction=VAL_FRACTION)
    s = train(TrainConfig(out=str(runs / "bpe"), tokenizer="bpe", vocab_size=640, **kw))
    c = load_corpus(str(corpus_dir), VAL_FRACTION, tokenizer="bpe", bpe_vocab_size=640,
                    cache_dir=runs / "bpe-cache")
    assert c.info["bpe_cache"] and (runs / "bpe-cache").is_dir()     # next to the run
    assert (runs / "bpe" / "tokenizer.json").read_bytes() == c.bpe.json_bytes
    cfg = json.loads((runs / "bpe" / "config.json").read_text())
    assert cfg["corpus"]["tokenizer_sha256"] == c.bpe.sha256 == cfg["identity"]["tokenizer_sha256"]
    assert s["vocab_size"] == 640 and s["tokenizer"] == "bpe"
    # compare pairs runs by the corpus hash: a byte run of the same text is not a baseline
    assert cfg["corpus"]["text_sha256"] == load_corpus(str(corpus_dir), VAL_FRACTION).sha256
    assert cfg["corpus"]["sha256"] != cfg["corpus"]["text_sha256"]
    # the denominator: bytes of the evaluated target tokens, counted from the corpus text
    # itself: the val stream decodes to the byte corpus's val documents (the Latin-1 one, in
    # validation, as the UTF-8 of its U+FFFD-replaced text, which is what was tokenized)
    byte_c = load_corpus(str(corpus_dir), VAL_FRACTION)
    val_docs, replaced = split_documents(byte_c.val)
    assert replaced == 1 == c.info["replaced_documents"]
    assert c.bpe.decode_bytes(c.val) == b"".join(d.encode() + b"\0" for d in val_docs)
    assert c.bpe.decode_bytes(c.val)[:2000] == byte_c.val.tobytes()[:2000]
    vb = val_batches(c.val, 32, 4, 512)
    covered = np.concatenate([w[:, 1:].reshape(-1) for w in vb])   # windows are consecutive
    assert np.array_equal(covered, c.val[1:1 + covered.size])
    n_bytes = len(c.bpe.decode_bytes(c.val[:1 + covered.size])) - \
        len(c.bpe.decode_bytes(c.val[:1]))
    tpb = tokens_per_byte(vb, c)
    assert tpb == covered.size / n_bytes and 0.25 < tpb < 0.9
    assert s["val_tokens_per_byte"] == tpb
    # total nats are the same counted either way: nats/token x tokens = nats/byte x bytes
    nats = s["final_val_loss"] * covered.size
    assert abs(s["final_val_loss_per_byte"] * n_bytes - nats) <= 1e-9 * nats
    # the byte tokenizer: one token per byte, the two numbers coincide
    sb = train(TrainConfig(out=str(runs / "bytes"), **kw))
    assert sb["val_tokens_per_byte"] == 1.0
    assert sb["final_val_loss_per_byte"] == sb["final_val_loss"] and sb["tokenizer"] == "bytes"


def test_cache_is_reused_and_checked(corpus_dir, tmp_path):
    cache = tmp_path / "cache"
    a = load_corpus(str(corpus_dir), VAL_FRACTION, tokenizer="bpe", bpe_vocab_size=600,
                    cache_dir=cache)
    (entry,) = list(cache.iterdir())
    b = load_corpus(str(corpus_dir), VAL_FRACTION, tokenizer="bpe", bpe_vocab_size=600,
                    cache_dir=cache)
    assert np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    assert a.info["tokenizer_sha256"] == b.info["tokenizer_sha256"]
    p = entry / "tokenizer.json"
    p.write_bytes(p.read_bytes().replace(b'"<|doc|>"', b'"<|DOC|>"', 1))
    with pytest.raises(DataError, match="does not match"):
        load_corpus(str(corpus_dir), VAL_FRACTION, tokenizer="bpe", bpe_vocab_size=600,
                    cache_dir=cache)


@pytest.mark.parametrize("kw, err, needle", [
    (dict(tokenizer="bpe", vocab_size=100), TrainingConfigError, "at least 258"),
    (dict(tokenizer="bpe", vocab_size=0), TrainingConfigError, "at least 258"),
    (dict(tokenizer="bpe", vocab_size=1 << 21), TrainingConfigError, "at most"),
    (dict(tokenizer="bytes", vocab_size=512), TrainingConfigError, "needs --tokenizer bpe"),
    (dict(tokenizer="wordpiece"), TrainingConfigError, "use bytes or bpe"),
])
def test_bad_settings_are_typed_errors(tmp_path, kw, err, needle):
    with pytest.raises(err, match=needle):
        train(TrainConfig(out=str(tmp_path / "r"), model="llama-tiny", tokens=256, seq_len=32,
                          batch_size=4, progress=False, **kw))
    assert not (tmp_path / "r").exists()


def test_bpe_on_a_token_file_and_cli_refusal(tmp_path):
    f = tmp_path / "ids.npy"
    np.save(f, np.arange(4000, dtype=np.int32) % 300)
    with pytest.raises(DataError, match="already"):
        load_corpus(str(f), 0.1, tokenizer="bpe", bpe_vocab_size=600)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "mxref.cli", "train", "--model", "llama-tiny",
                        "--out", str(tmp_path / "r"), "--tokenizer", "bpe", "--vocab-size", "7"],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "at least 258" in r.stderr
