#!/usr/bin/env python3
"""Checks that the README's two commands compile each dependency once.

Cargo unifies a dependency's features over the packages one command builds,
so the build (`-p labctl -p rdma-agent`), the unit tests (`--workspace`, with
dev-dependencies), the end-to-end tests (`-p lab-tests`) and the fuzz
targets (built with the build) can each pick a different feature set for the
same crate, and each difference recompiles it and everything above it.
crates/workspace-hack pins the union; this script resolves the four graphs
with `cargo tree` and fails, naming the crate and the features that differ,
when a crate they share would be built twice.

Usage: feature_sets.py   (from the repository root; exit 1 on a difference)
"""
import subprocess
import sys

COMMANDS = {
    "build (-p labctl -p rdma-agent)": ["-p", "labctl", "-p", "rdma-agent", "-e", "normal,build"],
    "unit tests (--workspace)": ["--workspace", "-e", "normal,build,dev"],
    "end-to-end (-p lab-tests)": ["-p", "lab-tests", "-e", "normal,build,dev"],
    "fuzz targets (with the build)": ["-p", "labctl", "-p", "rdma-agent", "-p", "labctl-fuzz", "-e", "normal,build"],
}
# Our own crates (and the test-only crate) are compiled per command anyway.
OURS = ("lab-", "labctl", "rdma-agent", "agent-proto", "fabric", "workload-", "workspace-hack")


def resolve(args: list) -> dict:
    """Package -> the features it is built with in one command (the union
    over where `cargo tree` shows it: a package built for the host too, as a
    build script's dependency, is shown once per place)."""
    out = subprocess.run(
        ["cargo", "tree", "--locked", "--prefix", "none", "-f", "{p}|{f}", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    packages = {}
    for line in out.splitlines():
        if "|" not in line:
            continue
        package, features = line.replace(" (*)", "").split("|", 1)
        name = package.split(" (")[0].strip()
        if name.startswith(OURS):
            continue
        packages.setdefault(name, set()).update(f for f in features.strip().split(",") if f)
    return packages


def differences(graphs: dict) -> list:
    names = list(graphs)
    base = graphs[names[0]]
    found = []
    for other in names[1:]:
        for package, features in graphs[other].items():
            if package in base and base[package] != features:
                found.append(
                    f"{package}: {names[0]} builds it with {sorted(base[package] - features)} "
                    f"that {other} does not, and without {sorted(features - base[package])}"
                )
    return found


def main() -> int:
    graphs = {name: resolve(args) for name, args in COMMANDS.items()}
    found = differences(graphs)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} crate(s) would be compiled more than once; add the missing features "
            "to crates/workspace-hack/Cargo.toml"
        )
        return 1
    print("feature sets: the build, the unit tests, the end-to-end tests and the fuzz targets agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
