"""Add ``saved_input_bytes`` to the provenance of the shipped CPU instances (issue 18, item 4).

Instances profiled before the profiler recorded it (``instances/*-cpu.json``) have
``saved_by_autograd_bytes`` but not ``saved_input_bytes``, so the pipeline's autograd memory model
falls back to abar for them (:func:`memplan.models.pipeline.autograd_stored_bytes`), about 25% above
what autograd keeps. Those values are sizes of tensors, not timings: for each instance this script
rebuilds the network from its provenance exactly as ``memplan profile`` built it (network,
``model_kw``, batch, input shape, seed, cross-entropy loss against fixed random labels, the
linearization of :func:`memplan.models.graph.linearize_model`, whose groups must equal the recorded
ones), measures every stage with :func:`memplan.models.profiler.measure_saved_bytes`, and checks
that the recomputed ``saved_by_autograd_bytes`` and stage sizes (a, abar) equal the recorded ones.
Instances profiled before the profiler left buffers out of ``saved_by_autograd_bytes`` (commit
e6ff0b4, 2026-11-21 13:43 UTC: ResNet-18/34/50 at batch 8) recorded the batch norms' running
statistics in it; they are recognized when the recorded values equal the recomputed ones plus the
saved buffers at every stage, exactly (the field is left as it is: a few kB per network, see the
printed total). ``saved_input_bytes`` does not depend on that rule (the input is neither a
parameter nor a buffer).
Only then does it add ``saved_input_bytes`` after ``saved_by_autograd_bytes``, touching no other
field, in the files' own JSON style (``json.dumps(indent=1)`` and a final newline, which the
shipped files round-trip byte for byte). An instance that already has the field is checked and left
as it is; one whose checks fail, or whose estimated cost is above the limits, is not written (the
reason is printed). Exit status 1 when some instance was refused.

    OMP_NUM_THREADS=1 python benchmarks/add_saved_input_bytes.py [--dry-run] [--max-seconds 180]
                                                                  [--max-gb 4] [instances/x-cpu.json ...]
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import glob
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOSS = "cross-entropy against fixed random labels"


def estimate(chain) -> tuple[float, float]:
    """(seconds, bytes): the recorded forward times times 5 (measure_saved_bytes runs three forwards
    per stage, plus building and tracing), and the largest stage input + 3 x abar (input, saved
    tensors of the hooked run and of the tracked one, output) plus the weights."""
    L = chain.L
    secs = 5.0 * float(chain.uf[1:].sum())
    mem = max(float(chain.wa[l - 1] + 3 * chain.wabar[l]) for l in range(1, L + 2)) + float(chain.weights.sum())
    return secs, mem


def rebuild(prov: dict):
    """(stages, input, loss) of the network an instance was profiled from (see the module docstring)."""
    import torch

    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    seed = int(prov.get("seed", 0))
    kw = dict(prov.get("model_kw") or {})
    torch.manual_seed(seed)
    model = get_model(prov["network"], **kw).train()
    x = example_input(prov["network"], int(prov["batch"]), tuple(prov["input"]), vocab=kw.get("vocab", 50257),
                      seed=seed)
    lm = linearize_model(model, x)
    if [list(g) for g in lm.groups] != [list(g) for g in prov["groups"]]:
        raise ValueError(f"the network linearizes into {lm.L} stages now, differently from the recorded "
                         f"{len(prov['groups'])} groups")
    return lm.stages, x, classification_loss(seed=seed)


def with_field(data: dict, values: list[float]) -> dict:
    """``data`` with ``provenance.saved_input_bytes`` inserted after ``saved_by_autograd_bytes``."""
    prov = {}
    for k, v in data["provenance"].items():
        prov[k] = v
        if k == "saved_by_autograd_bytes":
            prov["saved_input_bytes"] = values
    return {k: (prov if k == "provenance" else v) for k, v in data.items()}


def process(path: Path, args) -> str:
    """One instance: returns 'written', 'checked', 'unchanged' (dry run) or raises ValueError (refused)."""
    from memplan.models.instance import load_instance
    from memplan.models.profiler import measure_saved_bytes

    text = path.read_text()
    data = json.loads(text)
    if json.dumps(data, indent=1) + "\n" != text:
        raise ValueError("the file does not round-trip through json.dumps(indent=1); not rewriting it")
    prov = data.get("provenance") or {}
    missing = [k for k in ("network", "batch", "input", "groups", "saved_by_autograd_bytes") if k not in prov]
    if missing or prov.get("device") != "cpu" or prov.get("loss") != LOSS or "profile_batch" in prov:
        raise ValueError(f"not a CPU instance made by memplan profile (missing {missing}, device "
                         f"{prov.get('device')!r}, loss {prov.get('loss')!r})")
    chain, _ = load_instance(path)
    L = chain.L
    if len(prov["saved_by_autograd_bytes"]) != L + 1:
        raise ValueError(f"saved_by_autograd_bytes has {len(prov['saved_by_autograd_bytes'])} values, not L + 1 = {L + 1}")
    secs, mem = estimate(chain)
    if secs > args.max_seconds or mem > args.max_gb * 1e9:
        raise ValueError(f"skipped: estimated {secs:.0f} s and {mem / 1e9:.1f} GB, above the limits "
                         f"({args.max_seconds:.0f} s, {args.max_gb:g} GB)")
    t0 = time.perf_counter()
    stages, x, loss = rebuild(prov)
    got = measure_saved_bytes(stages, x, loss)
    took = time.perf_counter() - t0
    bad = []
    rec = [float(v) for v in prov["saved_by_autograd_bytes"]]
    old_rule = [s + b for s, b in zip(got["saved_by_autograd_bytes"], got["saved_buffer_bytes"])]
    note = ""
    if rec == old_rule and rec != got["saved_by_autograd_bytes"]:
        note = (f"; recorded by the profiler before it left buffers out ({sum(got['saved_buffer_bytes']):.0f} B "
                f"of batch-norm statistics in saved_by_autograd_bytes, left as they are)")
    elif rec != got["saved_by_autograd_bytes"]:
        diff = [l for l, (a, b) in enumerate(zip(got["saved_by_autograd_bytes"], rec), start=1) if a != b]
        bad.append(f"saved_by_autograd_bytes differs at stages {diff}")
    for key, rec in (("wa", chain.wa), ("wabar", chain.wabar)):
        # the file stores MiB with 9 decimals: within 0.001 B of a whole byte count
        diff = [l for l, (a, b) in enumerate(zip(got[key], rec)) if abs(a - float(b)) > 1e-3]
        if len(got[key]) != len(rec) or diff:
            bad.append(f"{key} differs at stages {diff}")
    if bad:
        raise ValueError("recomputed sizes differ from the recorded ones: " + "; ".join(bad))
    new = got["saved_input_bytes"]
    if "saved_input_bytes" in prov:
        if [float(v) for v in prov["saved_input_bytes"]] != new:
            raise ValueError("already has saved_input_bytes, and they differ from the recomputed ones")
        print(f"{path.name}: already has saved_input_bytes, equal to the recomputed ones ({took:.1f} s){note}")
        return "checked"
    if args.dry_run:
        print(f"{path.name}: checks passed ({took:.1f} s){note}; would add saved_input_bytes = {new}")
        return "unchanged"
    path.write_text(json.dumps(with_field(data, new), indent=1) + "\n")
    print(f"{path.name}: checks passed (L = {L}, {took:.1f} s){note}; saved_input_bytes added "
          f"({sum(v > 0 for v in new)} of {L + 1} stages save some of their input)")
    return "written"


def main(argv=None) -> int:
    ap = OneLineParser(name='add_saved_input_bytes', description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="instance files (default: instances/*-cpu.json)")
    ap.add_argument("--dry-run", action="store_true", help="check and print, write nothing")
    ap.add_argument("--max-seconds", type=float, default=180.0, help="skip instances estimated to take longer")
    ap.add_argument("--max-gb", type=float, default=4.0, help="skip instances estimated to need more memory")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    paths = [Path(p) for p in args.paths] or sorted(Path(p) for p in glob.glob(str(ROOT / "instances" / "*-cpu.json")))
    refused = 0
    for path in paths:
        try:
            process(path, args)
        except ValueError as e:
            print(f"{path.name}: NOT written: {e}")
            refused += 1
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'add_saved_input_bytes'))    # bad input: one line, exit 2