"""The verifiable task: multi-digit addition with a character-level tokenizer.

A problem ``a + b`` with ``digits``-digit operands (zero padded, so every prompt has the same
length and no padding is ever needed) is written ``"042+517="``; the answer is the sum's
``digits + 1`` digits written least-significant digit first (``"9550"`` for 559), then EOS.
LSB-first answers are what a left-to-right model can compute digit by digit (carry forward);
the reward does not care about the format's reason, only about the exact string.

Reward (binary, exact match): 1.0 when the generated tokens up to the first EOS spell exactly
the expected answer (all ``digits + 1`` digits, right order, nothing more), else 0.0. A
generation without EOS in its budget is scored on all its tokens (so it is 0: it is longer
than the answer, or has a non-digit).
"""
from __future__ import annotations

import numpy as np
import torch

VOCAB = list("0123456789+=") + ["<eos>", "<bos>"]
STOI = {c: i for i, c in enumerate(VOCAB)}
EOS = STOI["<eos>"]
BOS = STOI["<bos>"]
VOCAB_SIZE = len(VOCAB)


def encode(s: str) -> list[int]:
    return [STOI[c] for c in s]


def decode(ids) -> str:
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        out.append(VOCAB[i] if 0 <= i < VOCAB_SIZE else "?")
    return "".join(out)


def prompt_str(a: int, b: int, digits: int) -> str:
    return f"{a:0{digits}d}+{b:0{digits}d}="


def answer_str(a: int, b: int, digits: int) -> str:
    return f"{a + b:0{digits + 1}d}"[::-1]


def prompt_len(digits: int) -> int:
    return 1 + 2 * digits + 2          # <bos> a + b =


def answer_len(digits: int) -> int:
    return digits + 2                  # digits + 1 sum digits, then <eos>


def held_out(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The held-out split: a fixed ~10% of all (a, b) pairs, chosen by a hash of the pair
    (splitmix64 finalizer of a * 2^20 + b; held out when the hash is 0 mod 10), so the split
    is i.i.d. with the training pairs (no digit pattern is held out). Held-out pairs are never
    trained on (not in pretraining, not in RL prompts)."""
    with np.errstate(over="ignore"):
        z = (np.asarray(a, dtype=np.uint64) << np.uint64(20)) + np.asarray(b, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z % np.uint64(10) == 0


def sample_problems(rng: np.random.Generator, n: int, digits: int, split: str = "train"):
    """n (a, b) pairs of ``digits``-digit operands from the train or held-out split."""
    hi = 10 ** digits
    out_a, out_b, got = [], [], 0
    while got < n:
        a = rng.integers(0, hi, size=2 * n + 16)
        b = rng.integers(0, hi, size=2 * n + 16)
        keep = held_out(a, b) if split == "heldout" else ~held_out(a, b)
        out_a.append(a[keep])
        out_b.append(b[keep])
        got += int(keep.sum())
    return np.concatenate(out_a)[:n], np.concatenate(out_b)[:n]


def prompts_tensor(a, b, digits: int, device="cpu") -> torch.Tensor:
    rows = [[BOS] + encode(prompt_str(int(x), int(y), digits)) for x, y in zip(a, b)]
    return torch.tensor(rows, dtype=torch.long, device=device)


def sft_batch(a, b, digits: int, device="cpu"):
    """(input ids, loss mask) of prompt + answer + EOS; the loss covers the answer and EOS."""
    rows = [[BOS] + encode(prompt_str(int(x), int(y), digits) + answer_str(int(x), int(y), digits))
            + [EOS] for x, y in zip(a, b)]
    ids = torch.tensor(rows, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, prompt_len(digits):] = True
    return ids, mask


def reward(generated, a: int, b: int, digits: int) -> float:
    """1.0 if the tokens up to the first EOS spell exactly answer_str(a, b, digits), else 0.0."""
    return 1.0 if decode(generated) == answer_str(a, b, digits) else 0.0


def rewards(gen: torch.Tensor, a, b, digits: int) -> torch.Tensor:
    """Rewards of a batch of generations [B, T] (CPU float32)."""
    g = gen.detach().cpu().tolist()
    return torch.tensor([reward(r, int(x), int(y), digits) for r, x, y in zip(g, a, b)],
                        dtype=torch.float32)
