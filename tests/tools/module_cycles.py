#!/usr/bin/env python3
"""Finds import cycles between the modules of each workspace crate.

A module is a source file (src/lib.rs and src/main.rs are the crate root).
Module A depends on module B when a path in A's code (a `use` tree or a path
in an expression or type) resolves to B: `crate::B::Item`, `super::...`,
`self::B::...`, a child `B::Item`, or a name A imported (`use crate::B;`
then `B::Item`). The deepest module a path names is the target.

Re-exports are followed. A module that re-exports (`pub use`,
`pub(crate) use`, or a plain `use` its children can reach through `super::`)
depends on the module it takes the item from, like any `use`. A path that
reaches an item through a re-export depends on the re-exporting module and
on every module along the re-export chain down to the item's owner, so
`crate::a::Item` where `a` has `pub use self::b::Item` is an edge to `a` and
to `a::b`. The crate root is the crate's public face: passing through it
(`crate::Item` re-exported by lib.rs) is an edge to the owner only, not to
the root; an item the root defines itself is an edge to the root.

`mod` declarations are not edges (a parent owning a file is not a use of
it), and neither is test code (everything from a top-level `#[cfg(test)]` to
the end of the file, and files declared under `#[cfg(test)]`), comments, or
string literals.

Two kinds of cycle are reported, each as a strongly connected component of
more than one node with one path per edge that made it: between files, and
between sibling modules taken with all their submodules (`a/ <-> b/`: some
file under `a` uses one under `b` and the other way round, even when no two
files form a cycle). The script exits 1 if there is any.

Usage: module_cycles.py [CRATE_DIR...]   (default: every crates/*/)
"""
import pathlib
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
KEYWORDS = {"crate", "super", "self"}
# How many re-export hops a path may take before the script gives up on it
# (a re-export loop is a compile error, so this only stops runaway input).
MAX_HOPS = 32


def module_of(src: pathlib.Path, path: pathlib.Path) -> tuple:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts in (["lib"], ["main"]):
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def strip_comments_and_strings(text: str) -> str:
    """The code with comments removed and string/char literals emptied."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not re.match(r"\w", text[i - 1])):
            end = text.find('"' + m.group(1), i + m.end())
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not re.match(r"\w", text[i - 1]))):
            i = text.index('"', i) + 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and (m := re.match(r"'(\\(x..|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:], re.S)):
            i += m.end()  # a char literal; `'a` alone is a lifetime
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def code_of(text: str) -> str:
    cut = re.search(r"^#\[cfg\(test\)\]", text, re.M)
    if cut:
        text = text[: cut.start()]
    return strip_comments_and_strings(text)


USE = re.compile(r"(?<![\w:])use\s+((?:::)?[^;]+);")


def use_leaves(tree: str) -> list:
    """The leaves of a use tree: (path, bound name or None, is_glob).

    `a::{b, c::D as E, self, *}` gives (a,b) as b, (a,c,D) as E, (a) as a and
    a glob of a. A name bound as `_` binds nothing but is still a use.
    """
    tokens = re.findall(rf"::|[{{}},*]|{IDENT}", tree)
    leaves, pos = [], [0]

    def peek():
        return tokens[pos[0]] if pos[0] < len(tokens) else None

    def take():
        pos[0] += 1
        return tokens[pos[0] - 1]

    def tree_at(prefix):
        path = list(prefix)
        while True:
            t = peek()
            if t is None:
                return
            if t == "::":
                take()
                continue
            if t == "{":
                take()
                while peek() not in (None, "}"):
                    tree_at(path)
                    if peek() == ",":
                        take()
                if peek() == "}":
                    take()
                return
            if t == "*":
                take()
                leaves.append((path, None, True))
                return
            if t in (",", "}"):
                return
            take()
            if t == "self" and path:
                bound = path[-1]
            else:
                path.append(t)
                bound = t
            if peek() == "as":
                take()
                alias = take() if peek() is not None else "_"
                leaves.append((path, None if alias == "_" else alias, False))
                return
            if peek() != "::":
                leaves.append((path, bound, False))
                return

    while peek() is not None:
        tree_at([])
        if peek() == ",":
            take()
    return leaves


DEFINES = re.compile(
    rf"\b(?:fn|struct|enum|trait|type|const|static|union|mod|macro_rules!)\s+({IDENT})"
)


class Crate:
    def __init__(self, files: dict):
        self.mods = set(files)
        self.code = {m: code_of(p.read_text()) for m, p in files.items()}
        self.imports = {}  # module -> {bound name: path}
        self.globs = {}  # module -> [path]
        self.defines = {}  # module -> {name}
        for m, code in self.code.items():
            names, globs = {}, []
            for u in USE.finditer(code):
                for path, bound, glob in use_leaves(u.group(1)):
                    if glob:
                        globs.append(path)
                    elif bound is not None:
                        names[bound] = path
            self.imports[m], self.globs[m] = names, globs
            self.defines[m] = set(DEFINES.findall(code))

    def start(self, ctx: tuple, first: str):
        """The module a path's first segment names, if it names one itself."""
        if first == "crate":
            return ()
        if first == "self":
            return ctx
        if first == "super":
            return ctx[:-1]
        if ctx + (first,) in self.mods:
            return ctx + (first,)
        return None

    def resolve(self, ctx: tuple, path: list, hops: int = 0) -> list:
        """The modules a path written in `ctx` depends on: the deepest module
        it names (or the one owning the item it names) and every module a
        re-export along the way leads through."""
        if hops > MAX_HOPS or not path:
            return []
        first, rest = path[0], path[1:]
        cur = self.start(ctx, first)
        if cur is None:
            # A name this module imported (`use crate::aws;` then `aws::X`):
            # the path continues from what the import names.
            imported = self.imports.get(ctx, {}).get(first)
            if imported is None or imported == path[:1]:
                return []
            return self.resolve(ctx, imported + rest, hops + 1)
        i = 0
        while i < len(rest):
            seg = rest[i]
            if seg == "super":
                cur = cur[:-1]
            elif seg == "self":
                pass
            elif cur + (seg,) in self.mods:
                cur = cur + (seg,)
            else:
                break
            i += 1
        if i == len(rest):
            return [cur]
        return self.item(cur, rest[i], rest[i + 1 :], hops)

    def item(self, mod: tuple, name: str, rest: list, hops: int) -> list:
        """The modules naming `mod::name` depends on."""
        imported = self.imports[mod].get(name)
        if imported is not None:
            via = self.resolve(mod, imported + rest, hops + 1)
            if via:
                # Through the root: an edge to where it leads, not to the root.
                return via if mod == () else [mod] + via
        if name in self.defines[mod]:
            return [mod]
        for g in self.globs[mod]:
            target = self.resolve(mod, g, hops + 1)
            if len(target) == 1 and target[0] != mod:
                (t,) = target
                if name in self.defines[t] or name in self.imports[t]:
                    via = self.item(t, name, rest, hops + 1)
                    return via if mod == () else [mod] + via
        # An item the script cannot place (an extern re-export, a macro):
        # the module it was reached through, unless that is the root's face.
        return [] if mod == () else [mod]

    def edges(self, mod: tuple) -> dict:
        """Each module `mod` depends on, with one path that shows it."""
        code = self.code[mod]
        out = {}

        def add(path_text, path):
            for target in self.resolve(mod, path):
                if target != mod:
                    out.setdefault(target, path_text)

        uses = []
        for u in USE.finditer(code):
            uses.append(u.span())
            for path, _bound, _glob in use_leaves(u.group(1)):
                add("use " + "::".join(path), path)
        # Paths outside `use` items: in expressions, types, attributes.
        rest = " ".join(code[a:b] for a, b in _gaps(uses, len(code)))
        for m in re.finditer(rf"(?<![\w:])((?:{IDENT}::)+{IDENT})", rest):
            path = m.group(1).split("::")
            if path[0] in KEYWORDS or (mod + (path[0],)) in self.mods or path[0] in self.imports[mod]:
                add(m.group(1), path)
        return out


def _gaps(spans: list, n: int) -> list:
    """The ranges of 0..n outside `spans` (sorted, non-overlapping)."""
    out, at = [], 0
    for a, b in spans:
        out.append((at, a))
        at = b
    out.append((at, n))
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def name(mod: tuple) -> str:
    return "crate" if not mod else "::".join(mod)


TEST_MOD = re.compile(
    rf"^\s*#\[cfg\(test\)\]\s*((?:#\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+({IDENT})\s*;",
    re.M,
)


def test_files(src: pathlib.Path, files: dict) -> set:
    """The modules that are test code in their own file (`#[cfg(test)] mod
    tests;`, with or without `#[path = "..."]`)."""
    out = set()
    for m, p in files.items():
        for t in TEST_MOD.finditer(p.read_text()):
            path = re.search(r'#\[path\s*=\s*"([^"]+)"\]', t.group(1))
            out.add(module_of(src, p.parent / path.group(1)) if path else m + (t.group(2),))
    return out


def subtree_graphs(graph: dict, mods: set) -> dict:
    """Per parent module, the graph between its children taken with all
    their descendants: `a::x -> b::y` is an edge `a -> b` among the
    children of the root, whatever files it joins. Each edge keeps one
    file-level edge that made it, as (from, to, path)."""
    levels = {}
    for a, targets in graph.items():
        for b, why in targets.items():
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            if n == len(a) or n == len(b):
                continue  # a module and its own ancestor: the file level sees it
            parent = a[:n]
            x, y = a[: n + 1], b[: n + 1]
            levels.setdefault(parent, {}).setdefault(x, {}).setdefault(y, (a, b, why))
    return levels


def check(crate_dir: pathlib.Path) -> list:
    """One report per cycle: the modules, then each edge inside it with a
    path that made it. Cycles between files come first, then cycles between
    sibling modules taken with their submodules (`a/ <-> b/`), which no two
    files need to show on their own."""
    src = crate_dir / "src"
    files = {module_of(src, p): p for p in sorted(src.rglob("*.rs"))}
    tests = test_files(src, files)
    files = {m: p for m, p in files.items() if not any(m[: len(t)] == t for t in tests)}
    crate = Crate(files)
    graph = {m: crate.edges(m) for m in files}
    reports = []
    seen = []
    for comp in sccs(graph):
        seen.append(set(comp))
        lines = [f"{crate_dir.name}: " + " <-> ".join(name(m) for m in comp)]
        for a in comp:
            for b, why in sorted(graph[a].items()):
                if b in comp:
                    lines.append(f"    {name(a)} -> {name(b)}: {why}")
        reports.append("\n".join(lines))
    has_children = {m[:-1] for m in files if m}
    for parent, level in sorted(subtree_graphs(graph, set(files)).items()):
        for comp in sccs(level):
            if set(comp) in seen:
                continue
            label = lambda m: name(m) + ("/" if m in has_children else "")
            lines = [f"{crate_dir.name}: " + " <-> ".join(label(m) for m in comp)]
            for x in comp:
                for y, (a, b, why) in sorted(level[x].items()):
                    if y in comp:
                        lines.append(f"    {label(x)} -> {label(y)}: {name(a)} -> {name(b)}: {why}")
            reports.append("\n".join(lines))
    return reports


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
