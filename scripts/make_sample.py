"""Regenerate mxref/data/sample_activations_bf16.npy (provenance of the bundled sample).

A realistic LLM activation tensor: bf16, 128 tokens x 2048 channels, Gaussian body, a few
outlier channels (x40), per-token magnitude spread over 2^-4..2^4, stored as raw uint16 bf16 bit
patterns (load with source_dtype='bfloat16').
"""
import ml_dtypes
import numpy as np

rng = np.random.default_rng(20261121)
x = rng.standard_normal((128, 2048)).astype(np.float32)
x[:, rng.choice(2048, 6, replace=False)] *= 40.0
x *= np.exp2(rng.uniform(-4, 4, size=(128, 1))).astype(np.float32)
bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
np.save("mxref/data/sample_activations_bf16.npy", bits, allow_pickle=False)
