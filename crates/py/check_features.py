#!/usr/bin/env python3
"""Name the dependencies whose features differ between the workspace's test build
(`cargo test --workspace`) and a build of csd-py alone (what maturin runs).

Any difference recompiles that crate and everything above it (DataFusion) for the
Python extension. Exit status 1 and a list of `crate: features` to add to the
unification block of crates/py/Cargo.toml when they differ.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def features(*args: str) -> dict[str, set[str]]:
    out = subprocess.run(
        ["cargo", "tree", "--prefix", "none", "-f", "{p}|{f}", *args],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    found: dict[str, set[str]] = {}
    for line in out.splitlines():
        if "|" not in line:
            continue
        pkg, feats = line.split("|", 1)
        pkg = re.sub(r"\s*\(.*?\)", "", pkg).strip()
        feats = re.sub(r"\s*\(\*\)$", "", feats).strip()
        found.setdefault(pkg, set()).update(f for f in feats.split(",") if f)
    return found


def main() -> int:
    workspace = features("--workspace")
    alone = features("-p", "csd-py", "-e", "normal,build")
    diff = {
        pkg: sorted(workspace[pkg] - feats)
        for pkg, feats in alone.items()
        if pkg in workspace and workspace[pkg] != feats
    }
    if not diff:
        print("csd-py builds its dependencies with the workspace's features")
        return 0
    print("csd-py's dependencies differ in features from the workspace's test build;")
    print("maturin would compile them (and DataFusion above them) a second time. Add to")
    print("the unification block of crates/py/Cargo.toml:")
    for pkg, missing in sorted(diff.items()):
        print(f"  {pkg}: {', '.join(missing) or '(csd-py enables more: check the block)'}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
