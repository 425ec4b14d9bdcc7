"""``workbench parity``: qualify a change to the simulated engine, or propose a row's
capacity (docs/parity.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

NAME = "parity"
HELP = ("run a frozen parity spec on two revisions (or two engine configurations), twice "
        "each in separate processes: digests, first difference, pressure evidence")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="the parity spec (YAML or JSON; docs/parity.md)")
    p.add_argument("-o", "--out", dest="out_dir", default=None,
                   help="folder for parity.json (default: parity/<spec name>)")
    p.add_argument("--propose-capacity", metavar="ROW", default=None,
                   help="search ROW's capacity for preemptions in its range instead of "
                        "running the campaign")
    p.add_argument("--knob", default="num_blocks", help="the capacity knob searched "
                   "(default num_blocks)")
    p.add_argument("--build-python", metavar="PYTHON", default=None,
                   help="an interpreter whose setuptools builds a revision's compiled modules "
                        "when its C source differs from this tree's (else it runs the "
                        "Python twins)")
    p.add_argument("--write", metavar="NEW_SPEC", default=None,
                   help="with --propose-capacity: write the spec with the change found")


def _print_row(row: dict[str, Any]) -> None:
    b, c = row["baseline"], row["candidate"]
    print(f"{row['name']}: {row['verdict']}")
    print(f"  baseline  {b.get('digest')}")
    print(f"  candidate {c.get('digest')}")
    diff = row.get("first_difference") or {}
    first = diff.get("request")
    if first:
        print(f"  first difference: request {first['request_id']} (#{first['index']}), "
              f"field {first['field']}: {first['baseline']!r} -> {first['candidate']!r}")
    for section, paths in (diff.get("sections") or {}).items():
        print(f"  {section} differs at: {', '.join(paths[:4])}"
              f"{' …' if len(paths) > 4 else ''}")
    for name, side in (("baseline", b), ("candidate", c)):
        ev = side.get("evidence")
        if ev:
            figs = ", ".join(f"{k} {v['status']} ({_fig(v['figure'])})"
                             for k, v in ev["checks"].items() if v["status"] != "n/a")
            print(f"  evidence ({name}): {figs}")


def _fig(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, dict | list) else str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def run(args: argparse.Namespace) -> int:
    from workbench.qualify import apply_capacity, parity, propose_capacity, read_spec
    from workbench.safe_write import LinkRefused, write_atomic

    spec, data = read_spec(args.spec)  # read once: --write changes what was checked
    if args.write and Path(args.write).is_symlink():  # refused before the search, not after
        raise LinkRefused(args.write)
    if args.propose_capacity:
        found = propose_capacity(spec, args.propose_capacity, args.knob)
        for pr in found["probes"]:
            print(f"  {args.knob}={pr['value']}: {pr['preemptions']} preemptions "
                  f"(most per request {pr['most_per_request']}, not ok {pr['not_ok']})")
        if found["to"] is None:
            print(f"{found['row']}: no {args.knob} found in range {found['bounds']}: "
                  f"{found['note']}")
            return 1
        print(f"{found['row']}: {args.knob} {found['from']} -> {found['to']} "
              f"({found['preemptions']} preemptions; bounds {found['bounds']})")
        if args.write:
            new = apply_capacity(data, found["row"], args.knob, found["to"])
            # JSON, which a .yaml name reads back as well
            write_atomic(args.write, (json.dumps(new, indent=2) + "\n").encode())
            print(f"spec with the change: {args.write}")
        return 0
    out = Path(args.out_dir or Path("parity") / spec.name)
    result = parity(spec, out, build_python=args.build_python,
                    progress=lambda m: print(f"  {m}", flush=True))
    for row in result["rows"]:
        _print_row(row)
    excluded = result.get("excluded") or {}
    print(f"the digest leaves out exactly {len(excluded)} fields (the closed list, as the "
          f"revision that ran defines it): {', '.join(excluded)}")
    if result.get("stopped"):
        st = result["stopped"]
        print(f"stopped: {', '.join(st['unstable'])} unstable on {st['after']}; not run: "
              f"{', '.join(st['not_run']) or 'none'}")
    verdict = "qualified" if result["qualified"] else "NOT qualified"
    print(f"{verdict}: {sum(r['qualified'] for r in result['rows'])} of {len(result['rows'])} "
          f"rows ({result['wall_s']:.1f} s); {out / 'parity.json'}  "
          f"(render: workbench report {out})")
    return 0 if result["qualified"] else 1
