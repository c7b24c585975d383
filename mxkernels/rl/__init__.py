"""Minimal GRPO-style RL post-training with MXFP4 error arms (issue 32).

* :mod:`.task`: multi-digit addition, char tokenizer, exact-match reward.
* :mod:`.quant`: fake-quantized linears; bf16, plain MXFP4, the component-isolated arms
  (scale-bias / deadzone / grid-noise only, from mxref.decompose's exact components) and the
  corrections (macro-block, outlier fallback, AQN, all three).
* :mod:`.loop`: pretraining on the task format, the rollout / update loop, JSONL logging.
* :mod:`.experiment`: one command per grid (``mxref train rl``), paired compare tables, plots.
"""
from .quant import ARM_NOTES, ARMS  # noqa: F401
