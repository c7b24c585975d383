"""A byte-level BPE tokenizer trained on the training corpus (``mxref train --tokenizer bpe``).

Why: with the default byte tokenizer a loss is nats per byte; with a BPE it is nats per token,
and a token is several bytes, so losses of runs with different vocabularies are not the same
number. Runs report both: the loss in nats/token, and nats/byte = nats/token x tokens/byte,
where tokens/byte is counted exactly over the evaluated targets from each token's byte length
(:attr:`BPETokenizer.token_bytes`), so a BPE run and a byte run can be compared in nats/byte.

Training (Hugging Face ``tokenizers``, Rust): ``models.BPE`` with the GPT-2 ``ByteLevel``
pre-tokenizer (regex split, no prefix space) and ``BpeTrainer(vocab_size=N, min_frequency=2,
special_tokens=["<|doc|>"], initial_alphabet=ByteLevel.alphabet())``: id 0 is the document
separator (as byte 0 is for the byte tokenizer), ids 1..256 the 256 byte symbols (every byte
sequence is encodable), the rest merges. The input is the **training** documents only (the
validation documents are never seen by the tokenizer), decoded as UTF-8; a document that is not
valid UTF-8 (4 of 1,753 stdlib files on CPython 3.11) is decoded with U+FFFD replacements, is
counted in ``replaced_documents``, and its bytes are those of the text actually tokenized.

Determinism: the same corpus bytes + settings + ``tokenizers`` version give the same
``tokenizer.json`` bytes (tests/test_training_bpe.py trains twice in two processes, whose Rust
hash seeds differ, and compares bytes). Its SHA-256 is part of the run's identity and of the
corpus description in config.json, and the corpus SHA-256 of a BPE run hashes text and
vocabulary together (``text_sha256`` keeps the text's): runs are paired only with runs of the
same tokenization.

Cache: ``<parent of the run directory>/bpe-cache/<key>/`` (``tokenizer.json``, ``train.npy``,
``val.npy``, ``meta.json``), key = SHA-256 of (corpus SHA-256, val_fraction, vocab size,
settings, ``tokenizers`` version): paired runs beside each other train the tokenizer once; the
run directory gets its own copy of ``tokenizer.json``.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError, TrainingConfigError

SEPARATOR = "<|doc|>"
MIN_VOCAB = 257 + 1          # separator + 256 byte symbols + at least one merge
MAX_VOCAB = 1 << 20
SETTINGS = {"model": "BPE", "pre_tokenizer": "ByteLevel(add_prefix_space=False, use_regex=True)",
            "min_frequency": 2, "special_tokens": [SEPARATOR], "initial_alphabet": "ByteLevel",
            "input": "training documents, UTF-8 (errors=replace)", "version": 1}
_ENCODE_CHUNK = 64


def check_vocab_size(n) -> int:
    """A usable BPE vocabulary size, or TrainingConfigError."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TrainingConfigError(f"--vocab-size must be an integer, got {n!r}")
    if not MIN_VOCAB <= int(n) <= MAX_VOCAB:
        raise TrainingConfigError(
            f"--vocab-size {n}: a byte-level BPE needs at least {MIN_VOCAB} (the separator, the "
            f"256 byte symbols and one merge) and at most {MAX_VOCAB}")
    return int(n)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, the alphabet of ``ByteLevel``."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


@dataclass
class BPETokenizer:
    """A trained tokenizer: ``tokenizers.Tokenizer`` plus the exact bytes of every token."""

    tok: object
    json_bytes: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.json_bytes).hexdigest()

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    @property
    def token_bytes(self) -> np.ndarray:
        """Byte length of each token id (the separator counts 1, like byte 0)."""
        return np.array([len(b) for b in self.byte_table], dtype=np.int64)

    @property
    def byte_table(self) -> list[bytes]:
        if not hasattr(self, "_table"):
            dec = {c: b for b, c in bytes_to_unicode().items()}
            table = []
            for i in range(self.vocab_size):
                s = self.tok.id_to_token(i)
                table.append(b"\0" if s == SEPARATOR else bytes(dec[c] for c in s))
            self._table = table
        return self._table

    def encode(self, texts: list[str]) -> list[list[int]]:
        enc = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        out = []
        for i in range(0, len(texts), _ENCODE_CHUNK):
            out += [e.ids for e in enc(texts[i:i + _ENCODE_CHUNK], add_special_tokens=False)]
        return out

    def decode_bytes(self, ids) -> bytes:
        t = self.byte_table
        return b"".join(t[int(i)] for i in ids)

    @classmethod
    def from_json_bytes(cls, data: bytes) -> "BPETokenizer":
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(data.decode("utf-8")), data)


def split_documents(stream: np.ndarray) -> tuple[list[str], int]:
    """Documents of a byte stream (separated by byte 0) as text; and how many were not UTF-8."""
    docs, replaced = [], 0
    parts = stream.tobytes().split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    for d in parts:
        try:
            docs.append(d.decode("utf-8"))
        except UnicodeDecodeError:
            docs.append(d.decode("utf-8", errors="replace"))
            replaced += 1
    return docs, replaced


def train_bpe(docs: list[str], vocab_size: int) -> BPETokenizer:
    """Train the byte-level BPE of the module docstring on ``docs``."""
    check_vocab_size(vocab_size)
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:
        raise TrainingConfigError(f"--tokenizer bpe needs the 'tokenizers' package ({e}); "
                                  "pip install 'mxref[train]'") from None
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=[SEPARATOR], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    if tok.token_to_id(SEPARATOR) != 0:  # pragma: no cover - the trainer puts specials first
        raise DataError("BPE training did not give the separator id 0")
    return BPETokenizer(tok, tok.to_str().encode("utf-8"))


def _stream(tk: BPETokenizer, docs: list[str]) -> np.ndarray:
    ids = []
    for d in tk.encode(docs):
        ids += d
        ids.append(0)
    dtype = np.uint16 if tk.vocab_size <= 1 << 16 else np.int32
    return np.asarray(ids, dtype=dtype)


def bpe_cache_dir(run_dir: Path) -> Path:
    return Path(run_dir).resolve().parent / "bpe-cache"


def cache_key(corpus_sha256: str, val_fraction: float, vocab_size: int) -> str:
    import tokenizers

    ident = {"corpus_sha256": corpus_sha256, "val_fraction": val_fraction,
             "vocab_size": vocab_size, "settings": SETTINGS,
             "tokenizers": tokenizers.__version__}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]


def bpe_corpus(byte_corpus, vocab_size: int, val_fraction: float, cache_dir: Path | None):
    """The byte corpus re-tokenized with a BPE trained on its training documents (cached)."""
    Corpus = type(byte_corpus)      # data.Corpus, without importing data (it imports this module)

    vocab_size = check_vocab_size(vocab_size)
    if byte_corpus.tokenizer != "bytes":
        raise DataError(f"--tokenizer bpe needs a text corpus; {byte_corpus.source} is already "
                        f"tokenized ({byte_corpus.tokenizer})")
    key = cache_key(byte_corpus.sha256, val_fraction, vocab_size)
    d = None if cache_dir is None else Path(cache_dir) / key
    if d is not None and (d / "meta.json").is_file():
        meta = json.loads((d / "meta.json").read_text())
        data = (d / "tokenizer.json").read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["tokenizer_sha256"]:
            raise DataError(f"BPE cache {d}: tokenizer.json does not match meta.json; delete "
                            f"{d} to retrain")
        tk = BPETokenizer.from_json_bytes(data)
        train = np.load(d / "train.npy", allow_pickle=False)
        val = np.load(d / "val.npy", allow_pickle=False)
    else:
        train_docs, rep_t = split_documents(byte_corpus.train)
        val_docs, rep_v = split_documents(byte_corpus.val)
        if not train_docs:
            raise DataError(f"corpus {byte_corpus.source}: no training text to train a BPE on")
        tk = train_bpe(train_docs, vocab_size)
        train, val = _stream(tk, train_docs), _stream(tk, val_docs)
        lengths = tk.token_bytes
        meta = {"schema": "mxref-bpe-cache/1", "key": key, "tokenizer_sha256": tk.sha256,
                "vocab_size_requested": vocab_size, "vocab_size_trained": tk.vocab_size,
                "settings": SETTINGS, "replaced_documents": rep_t + rep_v,
                "train_bytes": int(lengths[train].sum()), "val_bytes": int(lengths[val].sum())}
        import tokenizers

        meta["tokenizers"] = tokenizers.__version__
        if d is not None:
            tmp = d.with_name(d.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            (tmp / "tokenizer.json").write_bytes(tk.json_bytes)
            np.save(tmp / "train.npy", train, allow_pickle=False)
            np.save(tmp / "val.npy", val, allow_pickle=False)
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            try:
                os.replace(tmp, d)
            except OSError:      # another process cached the same key first: same content
                shutil.rmtree(tmp, ignore_errors=True)
    info = {k: v for k, v in byte_corpus.info.items()}
    info.update(tokenizer_sha256=meta["tokenizer_sha256"],
                tokenizer_settings=SETTINGS, tokenizers_version=meta["tokenizers"],
                vocab_size_trained=meta["vocab_size_trained"],
                replaced_documents=meta["replaced_documents"],
                train_tokens_per_byte=train.size / max(1, meta["train_bytes"]),
                val_tokens_per_byte=val.size / max(1, meta["val_bytes"]),
                bpe_cache=None if d is None else str(d))
    lengths = np.zeros(vocab_size, dtype=np.int64)
    lengths[:tk.vocab_size] = tk.token_bytes
    # the corpus hash of a BPE run covers text and vocabulary: `mxref train compare` pairs runs
    # by it, and a byte run is no baseline for a BPE run (nor one BPE for another)
    info["text_sha256"] = byte_corpus.sha256
    sha = hashlib.sha256(f"{byte_corpus.sha256}:bpe:{meta['tokenizer_sha256']}".encode()).hexdigest()
    c = Corpus(source=byte_corpus.source, train=train, val=val, vocab_size=vocab_size,
               sha256=sha, n_documents=byte_corpus.n_documents, tokenizer="bpe",
               info=info, token_bytes=lengths)
    c.bpe = tk
    return c
