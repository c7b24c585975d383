"""The leaderboard record: one JSON document per entry (schema ``mxref-leaderboard/1``).

A record says what was timed (suite, entry, op/format/profile), how (the exact command, the
machine, the packages, the git commit and the tree of the files run, the golden suite and its
manifest hash), what was measured (the median of each repeat, their median and relative spread,
the samples and block sizes the repeats were cut from where a sample is one call or one step,
the roofline and peers measured in the same run) and why it may be trusted (the verify report
of the same run, by content hash).
``record_sha256`` is the SHA-256 of the canonical JSON of the record without that key.

The JSON Schema below is the contract; docs/leaderboard.md explains every field.
"""
from __future__ import annotations

SCHEMA = "mxref-leaderboard/1"
SUITES = ("cpu-emulator", "gpu-kernels", "training", "stacks")
# the roster a `run gpu --backend` job writes beside its records (mxref.leaderboard.stacks)
STACKS_SCHEMA = "mxref-leaderboard-stacks/1"
VERIFY_KINDS = ("mxref-verify", "in-run-validation")

_num = {"type": "number"}
_pos = {"type": "number", "exclusiveMinimum": 0}
_str = {"type": "string", "minLength": 1}
_sha = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_nstr = {"type": ["string", "null"]}
# repeats made of single samples (CPU rounds, training steps): the samples in time order and
# the sizes of the contiguous blocks whose medians are the repeats (record.medians_of_blocks)
_samples = {"type": "array", "items": _pos, "minItems": 1}
_blocks = {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1}
_together = {"samples": ["blocks", "repeats"], "blocks": ["samples"]}
_nnum = {"type": ["number", "null"]}
_count = {"type": "integer", "minimum": 0}

# one timing process's clocks while a kernel was timed (clocks.reduce_samples); the numbers are
# null where no sample had them, and `error` says why where a sample failed or none was taken
_clocks = {
    "type": "object",
    "required": ["source", "samples"],
    "additionalProperties": False,
    "properties": {
        "source": {"enum": ["nvml", "nvidia-smi", None]},
        "samples": _count,
        "sm_mhz_median": _nnum, "sm_mhz_min": _nnum, "sm_mhz_max": _nnum,
        "mem_mhz_median": _nnum, "power_w_median": _nnum, "temp_c_max": _nnum,
        "reasons": {"type": "array", "items": _str},             # clock-event reasons, by name
        "reason_samples": {"type": "object", "additionalProperties": _count},
        "errors": _count, "error": _nstr,
    },
}

_measure = {
    "type": "object",
    "required": ["name", "unit", "median"],
    "properties": {
        "name": _str, "unit": _str, "median": _pos,
        "repeats": {"type": "array", "items": _pos},
        "rate": {"type": ["number", "null"]}, "rate_unit": _nstr,
    },
}

RECORD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": SCHEMA,
    "type": "object",
    "required": ["schema", "suite", "entry", "group", "impl", "op", "format", "profile",
                 "params", "metric", "machine", "packages", "git", "golden", "command",
                 "verify", "created", "record_sha256"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": SCHEMA},
        "suite": {"enum": list(SUITES)},
        "entry": _str,                       # stable name within the suite
        "group": _str,                       # quantize, dual, dequantize, sr, rotate, convert, gemm, train
        "impl": _str,                        # what was timed: "triton fast", "mxref numba", ...
        "op": _str,                          # the verify op whose pass this entry needs
        "format": _str,
        "profile": _str,
        "params": {"type": "object"},        # size, axis, packed, model, tokens, ...
        "metric": {
            "type": "object",
            "required": ["name", "unit", "lower_is_better", "median", "repeats", "spread"],
            "additionalProperties": False,
            "properties": {
                "name": _str, "unit": _str, "lower_is_better": {"type": "boolean"},
                "median": _pos,                                  # median of `repeats`
                "repeats": {"type": "array", "items": _pos, "minItems": 1},
                "spread": {"type": "number", "minimum": 0},      # (max - min) / median of repeats
                # samples per repeat; with `samples`: the nominal block size, samples // repeats
                "samples_per_repeat": {"type": "integer", "minimum": 1},
                "samples": _samples, "blocks": _blocks,
                # separate processes the repeats came from, in process order (run --processes)
                "processes": {"type": "integer", "minimum": 1},
                # GPU: the clocks while this kernel was timed, one entry per process, in
                # process order (absent in older records)
                "clocks_under_load": {"type": "array", "minItems": 1,
                                      "items": {"oneOf": [{"type": "null"}, _clocks]}},
                "rate": {"type": ["number", "null"]},            # work / median (GB/s, TFLOP/s, ...)
                "rate_unit": _nstr,
            },
            "dependentRequired": _together,
        },
        "roofline": {"oneOf": [{"type": "null"}, {
            "type": "object",
            "required": ["name", "median", "unit", "ratio", "ratio_label"],
            "properties": {"name": _str, "median": _pos, "unit": _str,
                           "rate": {"type": ["number", "null"]}, "rate_unit": _nstr,
                           "ratio": _pos, "ratio_label": _str,
                           "repeats": {"type": "array", "items": _pos},
                           "samples": _samples, "blocks": _blocks},
            "dependentRequired": _together}]},
        "peers": {"type": "array", "items": {
            "type": "object", "required": ["name", "median", "unit"],
            "properties": {"name": _str, "median": _pos, "unit": _str,
                           "rate": {"type": ["number", "null"]}, "rate_unit": _nstr,
                           "ratio": {"type": ["number", "null"]}, "ratio_label": _nstr,
                           "note": _nstr}}},
        "quality": {"type": ["object", "null"]},    # training: losses, dL vs bf16, extra tokens
        "check": _nstr,                             # the in-bench bit check of this very kernel
        "machine": {
            "type": "object", "required": ["slug", "cpu", "cores"],
            "properties": {
                "slug": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]*$"},
                "cpu": _str, "cores": {"type": "integer", "minimum": 1},
                "memory_gib": {"type": ["number", "null"]}, "os": _nstr,
                "loadavg": {"type": ["array", "null"]},
                "accelerator": {"oneOf": [{"type": "null"}, {
                    "type": "object", "required": ["name", "runtime"],
                    "properties": {"name": _str, "runtime": _str, "driver": _nstr,
                                   "clocks": _nstr, "sms": {"type": ["integer", "null"]},
                                   "memory_gib": {"type": ["number", "null"]}}}]},
            },
        },
        "packages": {"type": "object", "required": ["python", "mxref"],
                     "additionalProperties": {"type": "string"}},
        "git": {"type": "object", "required": ["commit", "dirty", "tree"],
                "properties": {"commit": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
                               "dirty": {"type": "boolean"},
                               # the files' git tree (record.tree_hash), required since
                               # 2026-11-22: a record that cannot name its files is rejected
                               "tree": {"type": "string", "pattern": "^[0-9a-f]{40}$"}}},
        "golden": {"type": "object", "required": ["suite", "suite_version", "manifest_sha256"],
                   "properties": {"suite": _str, "suite_version": _str, "manifest_sha256": _sha}},
        "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "verify": {
            "type": "object",
            "required": ["kind", "report", "sha256", "status", "backend"],
            "properties": {"kind": {"enum": list(VERIFY_KINDS)},
                           "report": _str,          # path relative to the record store root
                           "sha256": _sha, "status": _str, "backend": _str,
                           "cases": {"type": "integer", "minimum": 0}},
        },
        "created": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"},
        "record_sha256": _sha,
    },
}


def schema_problems(record) -> list[str]:
    """Every JSON Schema violation of `record`, as 'path: message' lines (empty when valid)."""
    try:
        import jsonschema
    except ImportError:
        raise ImportError("checking leaderboard records needs jsonschema: "
                          "pip install 'mxref[leaderboard]'") from None

    v = jsonschema.Draft202012Validator(RECORD_SCHEMA)
    out = []
    for e in sorted(v.iter_errors(record), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in e.absolute_path) or "(record)"
        out.append(f"{where}: {e.message}")
    return out
