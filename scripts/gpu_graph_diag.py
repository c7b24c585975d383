import json, os, sys
from pathlib import Path
sys.path.insert(0, "tests")
import pytest
from test_training_graph import _run
class MP:
    def setenv(self, k, v): os.environ[k] = v
    def delenv(self, k, raising=False): os.environ.pop(k, None)
import tempfile
tmp = Path(tempfile.mkdtemp())
res = {}
for name, eager, kw in (("e1", True, {}), ("e2", True, {}), ("g1", False, {}), ("g2", False, {}),
                        ("e_fdw", True, {"recipe": "mxfp4-fdw"}), ("g_fdw", False, {"recipe": "mxfp4-fdw"}),
                        ("e_bf16", True, {"recipe": "bf16"}), ("g_bf16", False, {"recipe": "bf16"})):
    import mxkernels.training.trainer as T
    if "recipe" in kw:
        # _run fixes the recipe; patch TrainConfig default through kwargs is not possible: rebuild
        from mxkernels.training.trainer import TrainConfig, train
        os.environ.pop("MXK_CUDA_GRAPH_EAGER", None)
        if eager: os.environ["MXK_CUDA_GRAPH_EAGER"] = "1"
        cfg = TrainConfig(out=str(tmp / name), model="llama-tiny", recipe=kw["recipe"], tokens=12 * 8 * 64, seq_len=64, batch_size=8, grad_accum=2, seed=3, device="cuda", cuda_graph=True, progress=False, quant_time_every=0, eval_every=0)
        train(cfg)
        rows = [json.loads(x) for x in (Path(cfg.out) / "log.jsonl").read_text().splitlines()]
        res[name] = [(r["loss"], r["grad_norm"]) for r in rows]
    else:
        _, res[name] = _run(tmp, name, MP(), eager)
def first_diff(a, b):
    d = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return d[0] if d else None
print("e1 vs e2", first_diff(res["e1"], res["e2"]))
print("g1 vs g2", first_diff(res["g1"], res["g2"]))
print("e1 vs g1", first_diff(res["e1"], res["g1"]))
print("fdw e vs g", first_diff(res["e_fdw"], res["g_fdw"]))
print("bf16 e vs g", first_diff(res["e_bf16"], res["g_bf16"]))
