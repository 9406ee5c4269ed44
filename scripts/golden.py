#!/usr/bin/env python3
"""Golden modeled figures: `csd repro scan-paper`, `csd repro smart-ssd`, `csd bench query`
and `csd demo` must print exactly the modeled figures they printed before the SQL front end
moved to DataFusion (issue 12: speed work must not change the model).

The files in bench/golden/ were written by a release build of main before any change
(commit 442d29b) and re-recorded deliberately when a model change was intended: issue 17
(smart-ssd-sas embedded-CPU costs derived from the paper, equal-row synthetic tables,
hw-ISP aggregation in the flash controller, GET replies that book only the host link,
GET polling that backs off by doubling, the scan paper's Table 3 in its report), and
issue 30's event core becoming the default time model (2026-12-03; every change listed
in docs/time-model.md, "The default"). This
script runs the same commands with a csd binary and compares:

* JSON (`csd bench query --json`): every key except wall-clock ones (`wall_*`) must be
  equal, numbers exactly.
* Reports and stdout: line by line, after masking the wall-clock figures (lines that say
  "wall", the `wall s` / `rows/s (wall)` columns of the query tables). Result tables of
  the demo are compared too.

Usage: scripts/golden.py [path/to/csd]        (default target/release/csd)
       scripts/golden.py --write [path/to/csd] (re-record: only when a model change is
                                                intended, and say so in the commit)
Exit status 0 when every figure matches.

`cargo test -p csd --test golden` runs the same comparison on the test (debug) build, so
`cargo test --workspace` checks these figures without a release build.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "bench", "golden")


def run(binary, args, cwd):
    out = subprocess.run([binary] + args, cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"`csd {' '.join(args)}` failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


def strip_wall(v):
    if isinstance(v, dict):
        return {k: strip_wall(x) for k, x in v.items() if not k.startswith("wall")}
    if isinstance(v, list):
        return [strip_wall(x) for x in v]
    return v


def mask_text(text):
    """Masks wall-clock figures; keeps everything else."""
    lines = []
    wall_cols = None
    for line in text.splitlines():
        if "┆" in line:
            cells = line.split("┆")
            if any(w in c for c in cells for w in ("wall", "emulator")):
                wall_cols = [
                    i for i, c in enumerate(cells) if "wall" in c or "emulator" in c
                ]
            elif wall_cols:
                for i in wall_cols:
                    if i < len(cells):
                        cells[i] = " * "
                line = "┆".join(cells)
        elif not line.startswith("│"):
            wall_cols = None if not line.startswith(("╞", "├")) else wall_cols
        if re.search(r"wall", line, re.I) and "┆" not in line:
            line = re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "#", line)
        # The report's own path differs between runs.
        line = re.sub(r"report: \S+", "report: PATH", line)
        line = re.sub(r"--out \S+", "--out PATH", line)
        lines.append(line)
    return lines


def compare_json(name, got, want):
    g, w = strip_wall(got), strip_wall(want)
    g.pop("command", None)
    w.pop("command", None)
    if g == w:
        return True
    print(f"{name}: modeled figures differ")
    for i, (a, b) in enumerate(zip(g.get("runs", []), w.get("runs", []))):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                print(f"  run {i} {k}: got {a.get(k)} want {b.get(k)}")
    return False


def compare_text(name, got, want, skip=()):
    g, w = mask_text(got), mask_text(want)
    ok = True
    for i, (a, b) in enumerate(zip(g, w)):
        if a != b and not any(s in b for s in skip):
            if ok:
                print(f"{name}: differs")
            print(f"  line {i + 1}:\n    got  {a}\n    want {b}")
            ok = False
    if len(g) != len(w):
        print(f"{name}: {len(g)} lines, golden has {len(w)}")
        ok = False
    return ok


def main():
    args = sys.argv[1:]
    write = "--write" in args
    args = [a for a in args if a != "--write"]
    binary = os.path.abspath(args[0] if args else os.path.join(ROOT, "target", "release", "csd"))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        outputs = {}
        for paper in ["scan-paper", "smart-ssd"]:
            out_dir = os.path.join(tmp, paper)
            stdout = run(binary, ["repro", paper, "--out", out_dir], tmp)
            with open(os.path.join(out_dir, "report.md")) as f:
                outputs[f"{paper}.md"] = f.read()
            outputs[f"{paper}.stdout"] = stdout.replace(tmp, "TMP")
        for q in ["q6", "q1"]:
            outputs[f"bench-{q}.json"] = run(
                binary, ["bench", "query", "--sf", "0.2", "--query", q, "--json"], tmp
            )
        outputs["demo.stdout"] = run(binary, ["demo"], tmp)
        for name, text in outputs.items():
            path = os.path.join(GOLDEN, name)
            if write:
                with open(path, "w") as f:
                    f.write(text)
                continue
            with open(path) as f:
                want = f.read()
            if name.endswith(".json"):
                ok &= compare_json(name, json.loads(text), json.loads(want))
            else:
                ok &= compare_text(name, text, want)
    if write:
        print(f"golden files written to {GOLDEN}")
        return 0
    print("golden modeled figures: " + ("all equal" if ok else "DIFFERENT"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
