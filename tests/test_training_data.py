"""Training data: the stdlib corpus, the split, the seeded batch order, user token files."""
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from mxkernels.training import data as D
from mxref.errors import MXRefError
from mxkernels.training.errors import DataError


@pytest.fixture(scope="module")
def stdlib():
    return D.load_corpus("stdlib")


def test_stdlib_corpus_is_every_stdlib_py_file_split_by_document(stdlib):
    # expected sizes from the file system, not from the loader: every .py outside
    # site-packages, NUL bytes removed, one separator per document
    root = D.stdlib_root()
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("site-packages", "dist-packages",
                                                        "__pycache__")]
        files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    total = sum(len(p.read_bytes().replace(b"\0", b"")) + 1 for p in files)
    assert stdlib.n_documents == len(files)
    assert stdlib.train.size + stdlib.val.size == total
    assert 0.005 < stdlib.val.size / total < 0.05  # val_fraction 0.02 of documents
    assert stdlib.info["val_documents"] > 5
    assert stdlib.vocab_size == 256 and stdlib.train.dtype == np.uint8
    # documents end with the separator; the text contains no other NUL
    assert stdlib.train[-1] == D.DOC_SEPARATOR
    assert (stdlib.train == 0).sum() == stdlib.n_documents - stdlib.info["val_documents"]


def test_stdlib_corpus_is_deterministic(stdlib):
    again = D.load_corpus("stdlib")
    assert again.sha256 == stdlib.sha256
    assert np.array_equal(again.train, stdlib.train) and np.array_equal(again.val, stdlib.val)


def test_validation_documents_do_not_depend_on_seed_and_are_held_out(stdlib):
    # the split is by path hash: a fixed, seed-free set; a validation document's text does
    # not occur in the training stream
    doc = bytes(stdlib.val[:stdlib.val.tolist().index(0)])
    assert len(doc) > 200
    assert bytes(stdlib.train).find(doc[:400]) == -1


def _tokens(n=10_000, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n).astype(np.uint8)


def test_batches_are_a_pure_function_of_seed_and_step():
    toks = _tokens()
    a, b = D.BatchSampler(toks, 16, 8, seed=3), D.BatchSampler(toks, 16, 8, seed=3)
    for step in (0, 5, 77, 400):  # 400 crosses several epochs (n_windows = 624)
        assert np.array_equal(a.batch(step), b.batch(step))
    c = D.BatchSampler(toks, 16, 8, seed=4)
    assert not np.array_equal(a.batch(0), c.batch(0))


def test_each_epoch_visits_every_window_once_and_windows_are_corpus_slices():
    toks = np.arange(1000, dtype=np.int32)  # token value = position: windows are checkable
    s = D.BatchSampler(toks, seq_len=10, batch_size=3, seed=1)
    assert s.n_windows == 99
    rows = np.concatenate([s.batch(k) for k in range(33)])  # exactly one epoch
    starts = rows[:, 0]
    assert sorted(starts.tolist()) == list(range(0, 990, 10))
    assert np.array_equal(rows, starts[:, None] + np.arange(11)[None, :])
    # the next epoch is a different permutation of the same windows
    nxt = np.concatenate([s.batch(k) for k in range(33, 66)])[:, 0]
    assert sorted(nxt.tolist()) == sorted(starts.tolist()) and not np.array_equal(nxt, starts)


def test_rank_slices_tile_the_global_batch():
    s = D.BatchSampler(_tokens(), 16, 8, seed=0)
    full = s.batch(9)
    parts = [s.batch(9, rank=r, world_size=4) for r in range(4)]
    assert np.array_equal(np.concatenate(parts), full)


def test_text_and_npy_inputs(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_bytes(b"hello world\n" * 100)
    c = D.load_corpus(str(txt), val_fraction=0.1)
    assert c.train.size == 1080 and c.val.size == 120
    assert c.sha256 == hashlib.sha256(b"hello world\n" * 100).hexdigest()
    ids = np.arange(3000, dtype=np.int64) % 1000
    np.save(tmp_path / "t.npy", ids)
    c = D.load_corpus(str(tmp_path / "t.npy"), val_fraction=0.1)
    assert c.vocab_size == 1024 and c.tokenizer == "ids"
    assert np.array_equal(np.concatenate([c.train, c.val]), ids)


@pytest.mark.parametrize("arr,needle", [
    (np.zeros(100, np.float32), "integer"),
    (np.zeros((10, 10), np.int32), "1-D"),
    (np.array([1, -2, 3] * 50), "negative"),
])
def test_bad_token_files_are_refused(tmp_path, arr, needle):
    p = tmp_path / "bad.npy"
    np.save(p, arr)
    with pytest.raises(DataError, match=needle):
        D.load_corpus(str(p))


def test_bad_corpus_arguments(tmp_path):
    with pytest.raises(DataError, match="neither"):
        D.load_corpus(str(tmp_path / "missing.txt"))
    with pytest.raises(DataError, match="val_fraction"):
        D.load_corpus("stdlib", val_fraction=0.7)
    (tmp_path / "short.txt").write_bytes(b"abc")
    with pytest.raises(DataError, match="too few"):
        D.load_corpus(str(tmp_path / "short.txt"))
    with pytest.raises(DataError, match="shorter than one window"):
        D.val_batches(np.zeros(10, np.uint8), seq_len=64, batch_size=2, max_tokens=1000)
    with pytest.raises(MXRefError):
        D.BatchSampler(np.zeros(10, np.uint8), seq_len=64, batch_size=2, seed=0)
