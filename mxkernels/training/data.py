"""Training data: an offline text corpus, a byte-level tokenizer, and a batch order fixed by the seed.

Corpus sources (``corpus=`` of :func:`load_corpus`):

* ``"stdlib"`` (default): every ``.py`` file of this interpreter's standard library
  (``sysconfig.get_paths()["stdlib"]``, without ``site-packages`` / ``dist-packages``), read as
  bytes in sorted POSIX path order. Present offline on every machine with Python; its SHA-256
  is recorded in the run so that two runs can be checked to have seen the same text (it
  differs between Python versions, so compare runs made with the same interpreter).
* ``"python"``: the standard library as above (paths under ``stdlib/``) and then every ``.py``
  file of the interpreter's site-packages (:func:`site_roots`, paths under ``site/``,
  ``site1/``, ...): about 10x the standard library on a machine with torch, so that a 100M-token
  run is not many epochs of the same text. It depends on what is installed: pair runs made on
  the same machine image (the SHA-256 says whether two runs read the same text).
* a ``.txt`` (or any other text) file, or a directory of ``.txt``/``.py``/``.md`` files: bytes.
* a ``.npy`` file of non-negative integer token ids, one-dimensional (already tokenized).

Tokenizer: byte-level by default (vocabulary 256, token = byte value; byte 0 separates
documents, it never occurs in source text). ``tokenizer="bpe"``: a byte-level BPE trained on the
training documents (``tokenizer.py``; id 0 is the separator), cached next to the run.

Validation split: for a directory corpus (stdlib included) a file goes to validation when the
SHA-256 of its relative path, read as an integer, is below ``val_fraction`` of the range: a
fixed set of whole documents, independent of the seed. A single file or a ``.npy`` keeps its
last ``val_fraction`` of tokens for validation.

Batch order: the training stream is cut into non-overlapping windows of ``seq_len + 1`` tokens
(stride ``seq_len``). Epoch ``e`` visits the windows in the order
``numpy.random.Generator(PCG64([seed, e])).permutation(n_windows)``; global step ``s`` takes
samples ``s*B .. s*B+B-1`` of that endless sequence. The batch is a pure function of
(corpus, seq_len, B, seed, step): two runs with the same seed and different recipes see exactly
the same batches, and resuming needs nothing but the step number.
"""
from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from .errors import DataError

BYTE_VOCAB = 256
DOC_SEPARATOR = 0
_TEXT_SUFFIXES = (".txt", ".py", ".md", ".rst")
_SKIP_PARTS = ("site-packages", "dist-packages", "__pycache__")


@dataclass
class Corpus:
    """A tokenized corpus split into train and validation token streams."""

    source: str
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    sha256: str
    n_documents: int = 1
    tokenizer: str = "bytes"
    info: dict = field(default_factory=dict)
    # byte length of each token id (None: every token is one byte); nats/byte = nats/token x
    # tokens/byte
    token_bytes: np.ndarray | None = field(default=None, repr=False)

    def describe(self) -> dict:
        """JSON-able facts recorded in config.json."""
        return {"source": self.source, "sha256": self.sha256, "tokenizer": self.tokenizer,
                "vocab_size": self.vocab_size, "n_documents": self.n_documents,
                "train_tokens": int(self.train.size), "val_tokens": int(self.val.size), **self.info}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def site_roots() -> list[Path]:
    """The interpreter's site-packages directories: sysconfig's purelib and platlib, then
    site.getsitepackages() (Debian's dist-packages); existing, distinct, in that order."""
    import site

    roots = []
    cands = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    cands += list(getattr(site, "getsitepackages", lambda: [])())
    for c in cands:
        p = Path(c)
        if p.is_dir() and all(p.resolve() != r.resolve() for r in roots):
            roots.append(p)
    return roots


def _directory_files(root: Path, suffixes, prefix: str = "",
                     skip=_SKIP_PARTS) -> list[tuple[str, Path]]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)  # prune site-packages
        for fn in filenames:
            p = Path(dirpath) / fn
            if p.suffix in suffixes and p.is_file():
                files.append((prefix + p.relative_to(root).as_posix(), p))
    files.sort(key=lambda t: t[0])
    return files


def _is_val_document(relpath: str, val_fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big")
    return h < val_fraction * 2.0**64


def _load_directory(root: Path, suffixes, val_fraction: float, source: str,
                    files=None) -> Corpus:
    files = _directory_files(root, suffixes) if files is None else files
    if not files:
        raise DataError(f"corpus directory {root} holds no {'/'.join(suffixes)} files")
    digest = hashlib.sha256()
    train_parts, val_parts = [], []
    sep = bytes([DOC_SEPARATOR])
    for rel, p in files:
        data = p.read_bytes().replace(sep, b"")  # keep byte 0 for the separator
        digest.update(rel.encode() + sep + data + sep)
        (val_parts if _is_val_document(rel, val_fraction) else train_parts).append(data + sep)
    train = np.frombuffer(b"".join(train_parts), dtype=np.uint8)
    val = np.frombuffer(b"".join(val_parts), dtype=np.uint8)
    return Corpus(source=source, train=train, val=val, vocab_size=BYTE_VOCAB,
                  sha256=digest.hexdigest(), n_documents=len(files),
                  info={"root": str(root), "val_documents": len(val_parts)})


def _tail_split(tokens: np.ndarray, val_fraction: float, what: str):
    n_val = int(round(tokens.size * val_fraction))
    if tokens.size - n_val < 2 or n_val < 2:
        raise DataError(f"{what} has {tokens.size} tokens: too few to split into train and "
                        f"validation at val_fraction={val_fraction}")
    return tokens[:-n_val], tokens[-n_val:]


def load_corpus(corpus: str = "stdlib", val_fraction: float = 0.02,
                vocab_size: int | None = None, *, tokenizer: str = "bytes",
                bpe_vocab_size: int = 0, cache_dir: Path | None = None) -> Corpus:
    """Load and tokenize a corpus (see the module docstring for the sources).

    ``tokenizer="bpe"``: re-tokenize the byte corpus with a BPE of ``bpe_vocab_size`` trained
    on its training documents, cached under ``cache_dir`` (``tokenizer.bpe_corpus``)."""
    if tokenizer == "bpe":
        from .tokenizer import bpe_corpus

        return bpe_corpus(load_corpus(corpus, val_fraction), bpe_vocab_size, val_fraction,
                          cache_dir)
    if tokenizer != "bytes":
        raise DataError(f"tokenizer={tokenizer!r}; use bytes or bpe")
    if not 0.0 < val_fraction < 0.5:
        raise DataError(f"val_fraction must lie in (0, 0.5), got {val_fraction}")
    if corpus == "stdlib":
        return _load_directory(stdlib_root(), (".py",), val_fraction, "stdlib")
    if corpus == "python":
        files = _directory_files(stdlib_root(), (".py",), "stdlib/")
        for i, root in enumerate(site_roots()):
            files += _directory_files(root, (".py",), f"site{i or ''}/", skip=("__pycache__",))
        c = _load_directory(stdlib_root(), (".py",), val_fraction, "python", files=files)
        c.info["site_roots"] = [str(r) for r in site_roots()]
        return c
    path = Path(corpus)
    if not path.exists():
        raise DataError(f"corpus {corpus!r} is neither 'stdlib' nor an existing file or directory")
    if path.is_dir():
        return _load_directory(path, _TEXT_SUFFIXES, val_fraction, str(path))
    if path.suffix == ".npy":
        try:
            tokens = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise DataError(f"cannot read token file {path}: {e}") from None
        if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
            raise DataError(f"token file {path} must hold a 1-D integer array, "
                            f"got shape {tokens.shape} dtype {tokens.dtype}")
        if tokens.size and tokens.min() < 0:
            raise DataError(f"token file {path} holds negative token ids")
        top = int(tokens.max()) + 1 if tokens.size else 0
        vocab = vocab_size or -(-top // 64) * 64
        if top > vocab:
            raise DataError(f"token file {path} holds id {top - 1} >= vocab_size {vocab}")
        tokens = tokens.astype(np.int32 if vocab > 255 else np.uint8)
        train, val = _tail_split(tokens, val_fraction, str(path))
        return Corpus(source=str(path), train=train, val=val, vocab_size=vocab,
                      sha256=hashlib.sha256(tokens.tobytes()).hexdigest(), tokenizer="ids")
    data = path.read_bytes().replace(bytes([DOC_SEPARATOR]), b"")
    tokens = np.frombuffer(data, dtype=np.uint8)
    train, val = _tail_split(tokens, val_fraction, str(path))
    return Corpus(source=str(path), train=train, val=val, vocab_size=BYTE_VOCAB,
                  sha256=hashlib.sha256(data).hexdigest())


def decode_bytes(ids) -> str:
    """Byte-level detokenization (for samples and debugging)."""
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class BatchSampler:
    """Global batches of ``B`` windows of ``seq_len + 1`` tokens; a pure function of the step."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int):
        if seq_len < 1 or batch_size < 1:
            raise DataError(f"seq_len and batch_size must be positive, got {seq_len}, {batch_size}")
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.n_windows = (tokens.size - 1) // seq_len
        if self.n_windows < 1:
            raise DataError(f"{tokens.size} training tokens are fewer than one window of "
                            f"seq_len + 1 = {seq_len + 1}")

    @lru_cache(maxsize=4)
    def _epoch_order(self, epoch: int) -> np.ndarray:
        return np.random.Generator(np.random.PCG64([self.seed, epoch])).permutation(self.n_windows)

    def window_ids(self, step: int) -> np.ndarray:
        k = np.arange(step * self.batch_size, (step + 1) * self.batch_size, dtype=np.int64)
        out = np.empty_like(k)
        for epoch in np.unique(k // self.n_windows):
            sel = (k // self.n_windows) == epoch
            out[sel] = self._epoch_order(int(epoch))[k[sel] % self.n_windows]
        return out

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> np.ndarray:
        """Rows of the global batch of ``step`` that belong to ``rank``: shape (B/world, seq+1).

        Ranks take contiguous slices, so a block of rows never straddles two ranks.
        """
        ids = self.window_ids(step)
        per = self.batch_size // world_size
        ids = ids[rank * per:(rank + 1) * per]
        starts = ids * self.seq_len
        idx = starts[:, None] + np.arange(self.seq_len + 1)[None, :]
        return self.tokens[idx].astype(np.int64)

    def epochs_at(self, step: int) -> float:
        return step * self.batch_size / self.n_windows


def val_batches(tokens: np.ndarray, seq_len: int, batch_size: int, max_tokens: int):
    """Fixed validation batches: consecutive windows from the start of the validation stream."""
    n = min((tokens.size - 1) // seq_len, max(1, max_tokens // seq_len))
    if n < 1:
        raise DataError(f"validation stream of {tokens.size} tokens is shorter than one window "
                        f"of {seq_len + 1}; lower seq_len or raise val_fraction")
    starts = np.arange(n, dtype=np.int64) * seq_len
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    windows = tokens[idx].astype(np.int64)
    return [windows[i:i + batch_size] for i in range(0, n, batch_size)]
