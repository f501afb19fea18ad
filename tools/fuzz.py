"""The long fuzz run of the onnxmem command line (``make fuzz``).

Runs seeded cases of every mutation family of ``tools/fuzzlib`` through the
real CLI, prints a table of failures by family and command, and copies every
failing case (its files and ``result.json`` with the seed) under ``--out``.

    python tools/fuzz.py --seed 0 --minutes 30 --cases 5000
    python tools/fuzz.py --replay dims:17 --keep      # one case again, folder kept

``--cases`` is the number of mutated models (spread over the model families and
the commands plan, plan --measure-shapes, verify and compare); ``--plans`` and
``--csvs`` the corrupted plans (verify, show, plot) and hostile CSVs (pack);
``--functions``, ``--zoos``, ``--exports``, ``--trips``, ``--ranges``, ``--feeds`` and
``--flags`` the cases of those families (1000, 600, 1000, 400, 600, 600, 900: with the
defaults above, 11,100 cases in all).
Exit status: 0 when every case is clean, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import fuzzlib as fuzzing  # noqa: E402

#: the long run's count of each family with an option of its own
EXTRA_DEFAULTS = {"functions": 1000, "zoo": 600, "exports": 1000, "trips": 400, "ranges": 600,
                  "feeds": 600, "flags": 900}


def _counts(cases: int | None, plans: int, csvs: int, extra: dict[str, int | None],
            only: list[str]) -> dict[str, int]:
    """Cases per family. With ``--only`` and an explicit ``--cases``, the cases are spread over the
    listed families other than plans and csv, except those given a count of their own."""
    spread = [f for f in fuzzing.MODEL_FAMILIES if not only or f in only]
    if only and cases is not None:
        spread += [f for f in fuzzing.EXTRA_FAMILIES if f in only and extra[f] is None]
    spread = spread or list(fuzzing.MODEL_FAMILIES)
    total = 5000 if cases is None else cases
    counts = {f: total // len(spread) + (1 if i < total % len(spread) else 0) for i, f in enumerate(spread)}
    counts["plans"] = plans
    counts["csv"] = csvs
    for f in fuzzing.EXTRA_FAMILIES:
        if f not in counts:
            counts[f] = EXTRA_DEFAULTS[f] if extra[f] is None else int(extra[f] or 0)
    if only:
        counts = {f: n for f, n in counts.items() if f in only}
    return {f: n for f, n in counts.items() if n > 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="first seed of every family")
    ap.add_argument("--minutes", type=float, default=None, help="start no case after this many minutes")
    ap.add_argument("--cases", type=int, default=None,
                    help="mutated models (the model families; 5000); with --only, spread over the listed "
                         "families that have no count option given")
    ap.add_argument("--plans", type=int, default=500, help="corrupted plans (verify, show, plot)")
    ap.add_argument("--csvs", type=int, default=500, help="hostile CSVs (pack)")
    ap.add_argument("--functions", type=int, default=None,
                    help=f"models with local functions (default {EXTRA_DEFAULTS['functions']})")
    ap.add_argument("--zoos", type=int, default=None, help=f"hostile zoo folders (default {EXTRA_DEFAULTS['zoo']})")
    ap.add_argument("--exports", type=int, default=None,
                    help=f"hostile plans into export and instantiate (default {EXTRA_DEFAULTS['exports']})")
    ap.add_argument("--trips", type=int, default=None,
                    help=f"Loops with huge or endless trip counts (default {EXTRA_DEFAULTS['trips']})")
    ap.add_argument("--ranges", type=int, default=None,
                    help=f"ranged dims into range plans and fit (default {EXTRA_DEFAULTS['ranges']})")
    ap.add_argument("--feeds", type=int, default=None,
                    help=f"hostile --inputs files and training checkpoints (default {EXTRA_DEFAULTS['feeds']})")
    ap.add_argument("--flags", type=int, default=None,
                    help=f"hostile values of every command's options (default {EXTRA_DEFAULTS['flags']})")
    ap.add_argument("--sample", action="store_true",
                    help="run the default suite's sample (its counts, sizes and 10 s bound)")
    ap.add_argument("--only", action="append", default=[], metavar="FAMILY",
                    help=f"run only these families: {', '.join(fuzzing.FAMILIES)} (repeatable)")
    ap.add_argument("--replay", action="append", default=[], metavar="FAMILY:SEED",
                    help="run exactly these cases (repeatable)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--subprocess", action="store_true",
                    help="a fresh interpreter per case (slower: about a second of imports each)")
    ap.add_argument("--bound", type=float, default=30.0, help="seconds before a run counts as a hang")
    ap.add_argument("--mem-gib", type=float, default=6.0, help="address space limit of a run")
    ap.add_argument("--max-depth", type=int, default=40, help="deepest If/Loop nesting")
    ap.add_argument("--max-nodes", type=int, default=3000, help="largest generated graph")
    ap.add_argument("--out", type=Path, default=Path("results/fuzz"), help="report and failing cases")
    ap.add_argument("--keep", action="store_true", help="keep every case folder under OUT/work")
    args = ap.parse_args(argv)

    unknown = [f for f in args.only if f not in fuzzing.FAMILIES]
    if unknown:
        ap.error(f"unknown family {unknown[0]!r}; known: {', '.join(fuzzing.FAMILIES)}")
    if args.replay:
        pairs = []
        for item in args.replay:
            fam, _, seed = item.partition(":")
            if fam not in fuzzing.FAMILIES or not seed.lstrip("-").isdigit():
                ap.error(f"--replay {item!r}: expected FAMILY:SEED")
            pairs.append((fam, int(seed)))
    elif args.sample:
        counts = {f: n for f, n in fuzzing.SAMPLE_COUNTS.items() if not args.only or f in args.only}
        pairs = list(fuzzing.iter_cases(counts, args.seed))
        args.bound = fuzzing.SAMPLE_BOUND
        args.max_depth, args.max_nodes = fuzzing.SAMPLE_SCALE.max_depth, fuzzing.SAMPLE_SCALE.max_nodes
    else:
        extra = {"functions": args.functions, "zoo": args.zoos, "exports": args.exports, "trips": args.trips,
                 "ranges": args.ranges, "feeds": args.feeds, "flags": args.flags}
        pairs = list(fuzzing.iter_cases(_counts(args.cases, args.plans, args.csvs, extra, args.only), args.seed))

    out: Path = args.out.resolve()  # workers change folder: every path they get is absolute
    out.mkdir(parents=True, exist_ok=True)
    config = fuzzing.RunConfig(
        workers=args.workers, bound=args.bound, mem_limit=int(args.mem_gib * (1 << 30)),
        scale=fuzzing.Scale(max_depth=args.max_depth, max_nodes=args.max_nodes),
        failures_dir=out / "failures",
        deadline=None if args.minutes is None else time.monotonic() + args.minutes * 60,
        keep=args.keep or bool(args.replay), subprocess=args.subprocess,
    )
    started = time.monotonic()
    log = (out / "results.jsonl").open("w")
    done = [0]

    def on_result(o: fuzzing.Outcome) -> None:
        log.write(fuzzing.outcome_json(o) + "\n")
        log.flush()
        done[0] += 1
        if o.classes or done[0] % 100 == 0:
            mark = ",".join(o.classes) or "ok"
            print(f"[{done[0]}/{len(pairs)} {time.monotonic() - started:.0f}s] {o.case.key} "
                  f"{o.case.command}: {mark}", file=sys.stderr, flush=True)

    outcomes = fuzzing.run_cases(pairs, out / "work", config, on_result)
    log.close()
    seconds = time.monotonic() - started
    table = fuzzing.summary_table(outcomes)
    ex = fuzzing.examples(outcomes)
    head = (f"onnxmem fuzz: seed {args.seed}, {len(outcomes)} of {len(pairs)} cases in {seconds:.0f} s, "
            f"{args.workers} workers, bound {args.bound:.0f} s, memory {args.mem_gib:g} GiB\n\n")
    report = head + table + ("\nOne reproducing case per class (tools/fuzz.py --replay FAMILY:SEED):\n\n"
                             + ex if ex else "")
    (out / "summary.md").write_text(report)
    (out / "summary.json").write_text(json.dumps(
        {"seed": args.seed, "cases": len(outcomes), "seconds": round(seconds, 1),
         "failing": sum(1 for o in outcomes if o.classes)}, indent=1))
    print(report)
    print(f"report       {out / 'summary.md'}\nfailures     {out / 'failures'}")
    return 1 if any(o.classes for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
