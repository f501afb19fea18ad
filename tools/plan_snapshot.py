"""Record, or check, the exact plans onnxmem makes for every model it ships or documents.

A restructuring must not change a single plan. This script plans the shipped
models, the nine models of the onnx wheel and every weight-free fixture of the
zoo with the default options, and keeps for each one the arena size, the lower
bound and a digest of the whole plan (operator order and every tensor's offset,
size and lifetime). ``--write`` records the snapshot; the default mode plans
again and lists every model whose plan differs.

    python tools/plan_snapshot.py            # check against docs/plan-snapshot.json
    python tools/plan_snapshot.py --write    # record a new snapshot
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "docs" / "plan-snapshot.json"
SHIPPED_DIMS = {"transformer_block": {"batch": 1, "seq": 128}}
LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512")


def _models() -> list[tuple[str, Path, dict[str, int]]]:
    from onnxmem.zoo import light_model_path, load_zoo

    out = [(f"models/{p.stem}", p, SHIPPED_DIMS.get(p.stem, {}))
           for p in sorted((ROOT / "models").glob("*.onnx"))]
    out += [(f"onnx/{n}", light_model_path(n), {}) for n in LIGHT]
    out += [(f"zoo/{m.name}", m.path, dict(m.dims)) for m in load_zoo(ROOT / "models" / "zoo")]
    return out


def _digest(plan: object) -> str:
    tensors = sorted(
        (t.name, t.offset, t.size, t.start, t.end, t.group)  # type: ignore[attr-defined]
        for t in plan.tensors  # type: ignore[attr-defined]
    )
    body = json.dumps([list(plan.order), tensors], separators=(",", ":"))  # type: ignore[attr-defined]
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def snapshot(only: str | None = None) -> dict[str, dict[str, object]]:
    from onnxmem.planning.pipeline import PlanOptions, plan_model

    result: dict[str, dict[str, object]] = {}
    for key, path, dims in _models():
        if only and only not in key:
            continue
        t0 = time.perf_counter()
        planned = plan_model(path, PlanOptions(dims=dims))
        plan = planned.plan
        result[key] = {"arena_size": plan.arena_size, "lower_bound": plan.lower_bound,
                       "digest": _digest(plan)}
        print(f"{key:40s} arena {plan.arena_size:>12,}  {time.perf_counter() - t0:6.2f} s",
              file=sys.stderr)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="record a new snapshot")
    ap.add_argument("--only", help="only the models whose key contains this text")
    args = ap.parse_args()
    got = snapshot(args.only)
    if args.write:
        SNAPSHOT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT.relative_to(ROOT)}: {len(got)} plans")
        return 0
    want = json.loads(SNAPSHOT.read_text())
    changed = [k for k in got if got[k] != want.get(k)]
    for k in changed:
        print(f"changed: {k}: {want.get(k)} -> {got[k]}")
    print(f"{len(got) - len(changed)} of {len(got)} plans identical to {SNAPSHOT.relative_to(ROOT)}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
