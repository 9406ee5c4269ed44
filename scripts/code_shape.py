#!/usr/bin/env python3
"""The shape of the code: source files and functions that have grown past the house sizes.

Usage (from the repository root):

    python3 scripts/code_shape.py              # list what is over the limits
    python3 scripts/code_shape.py --fn 70      # a stricter function limit
    python3 scripts/code_shape.py --check      # exit 1 if anything is over (for CI or hooks)

Counted: non-test code under crates/*/src. Test code is left out: `#[cfg(test)]` items and
modules, files named tests*.rs, tests/ benches/ and examples/ directories. A function's
length runs from its `fn` line to its closing brace (doc comments above it not counted).
The limits are the house habits of issue 15 (files about 1,000 lines, functions 100 lines;
TigerBeetle's 70 is the aim): a report, not a lint, so a function that reads best whole can
stay long with a reason in review.
"""

import argparse
import os
import re
import sys

FN = re.compile(r"(\s*)(pub(\([a-z: ]+\))? )?(const )?(async )?(unsafe )?(extern \"C\" )?fn (\w+)")


def closing(lines, i, indent):
    """Index of the line closing the item opened at line i with the given indent."""
    pad = " " * indent + "}"
    k = i + 1
    while k < len(lines):
        line = lines[k]
        if line.startswith(pad) and len(line) - len(line.lstrip()) == indent:
            return k
        k += 1
    return len(lines) - 1


def shape(path):
    """(non-test line count, [(length, line, name)]) of one file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    counted = 0
    fns = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"\s*#\[cfg\(test\)\]", line):
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith("#["):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith(";"):
                i = j + 1
                continue
            if j < len(lines):
                indent = len(lines[j]) - len(lines[j].lstrip())
                i = closing(lines, j, indent) + 1
                continue
        counted += 1
        m = FN.match(line)
        if m and not line.rstrip().endswith(";"):
            end = closing(lines, i, len(m.group(1)))
            fns.append((end - i + 1, i + 1, m.group(8)))
        i += 1
    return counted, fns


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fn", type=int, default=100, help="function length limit (lines)")
    ap.add_argument("--file", type=int, default=1000, help="file length limit (non-test lines)")
    ap.add_argument("--check", action="store_true", help="exit 1 when anything is over")
    args = ap.parse_args()
    files, fns = [], []
    for root, dirs, names in os.walk("crates"):
        dirs[:] = [d for d in dirs if d not in ("tests", "benches", "examples", "target")]
        if "/src" not in root + "/":
            continue
        for name in sorted(names):
            if not name.endswith(".rs") or name.startswith("tests"):
                continue
            path = os.path.join(root, name)
            n, f = shape(path)
            if n > args.file:
                files.append((n, path))
            fns += [(length, path, line, fname) for length, line, fname in f if length > args.fn]
    for n, path in sorted(files, reverse=True):
        print(f"file {path}: {n} non-test lines (limit {args.file})")
    for length, path, line, fname in sorted(fns, reverse=True):
        print(f"fn   {path}:{line} {fname}: {length} lines (limit {args.fn})")
    print(f"{len(files)} files over {args.file} lines, {len(fns)} functions over {args.fn} lines")
    if args.check and (files or fns):
        sys.exit(1)


if __name__ == "__main__":
    main()
