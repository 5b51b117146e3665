#!/usr/bin/env python3
"""Finds import cycles between the modules of each workspace crate.

A module is a source file (src/lib.rs and src/main.rs are the crate root).
Module A depends on module B when A's code names `crate::B...`, `super::...`
resolving to B, a `crate::{B, ...}` group, or a child B by a relative path
(`B::Item`, `self::B::Item`). `mod` declarations are not
edges (a parent owning a file is not a use of it), and neither is test code
(everything from a top-level `#[cfg(test)]` to the end of the file), nor
comments. Cycles are reported as the strongly connected components of more
than one module; the script exits 1 if there is any.

Usage: module_cycles.py [CRATE_DIR...]   (default: every crates/*/)
"""
import pathlib
import re
import sys

IDENT = r"[a-z_][a-z0-9_]*"


def module_of(src: pathlib.Path, path: pathlib.Path) -> tuple:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts in (["lib"], ["main"]):
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def code_of(text: str) -> str:
    cut = re.search(r"^#\[cfg\(test\)\]", text, re.M)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"//[^\n]*", "", text)  # line and doc comments
    return text


def resolve(mods: set, path: list) -> tuple | None:
    """The longest prefix of `path` that is a module of the crate."""
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return None


def edges_of(mod: tuple, code: str, mods: set) -> set:
    out = set()
    for m in re.finditer(rf"\bcrate::((?:{IDENT}::)*{IDENT})", code):
        target = resolve(mods, m.group(1).split("::"))
        if target is not None:
            out.add(target)
    for m in re.finditer(r"\bcrate::\{([^}]*)\}", code):
        for item in m.group(1).split(","):
            first = item.strip().split("::")[0].strip()
            if re.fullmatch(IDENT, first or "-"):
                target = resolve(mods, [first])
                if target is not None:
                    out.add(target)
    for m in re.finditer(rf"\b((?:super::)+)((?:{IDENT}::)*{IDENT})?", code):
        ups = m.group(1).count("super::")
        # For a file module, `super` is its parent module.
        base = list(mod[: len(mod) - ups]) if ups <= len(mod) else []
        rest = (m.group(2) or "").split("::") if m.group(2) else []
        target = resolve(mods, base + rest) or tuple(base)
        out.add(target)
    # `self::child::Item` (`use self::error::AwsError`): the same edge.
    for m in re.finditer(rf"\bself::((?:{IDENT}::)*{IDENT})", code):
        target = resolve(mods, list(mod) + m.group(1).split("::"))
        if target is not None:
            out.add(target)
    # A child named by a relative path (`qemu::QemuProvider` in its parent).
    for child in (m for m in mods if len(m) == len(mod) + 1 and m[: len(mod)] == mod):
        if re.search(rf"(?<![:\w]){child[-1]}::", code):
            out.add(child)
    out.discard(mod)
    return out


def sccs(graph: dict) -> list:
    index, low, stack, on, result, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                result.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return result


def name(mod: tuple) -> str:
    return "crate" if not mod else "::".join(mod)


def check(crate_dir: pathlib.Path) -> list:
    src = crate_dir / "src"
    files = {module_of(src, p): p for p in src.rglob("*.rs")}
    mods = set(files)
    graph = {m: edges_of(m, code_of(p.read_text()), mods) for m, p in files.items()}
    return [f"{crate_dir.name}: " + " <-> ".join(name(m) for m in comp) for comp in sccs(graph)]


def main() -> int:
    root = pathlib.Path(__file__).resolve().parents[2]
    dirs = [pathlib.Path(d) for d in sys.argv[1:]] or sorted(p.parent for p in root.glob("crates/*/src"))
    problems = [c for d in dirs for c in check(d)]
    for p in problems:
        print(f"import cycle: {p}")
    print(f"module cycles: {len(dirs)} crates checked, {len(problems)} cycles")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
