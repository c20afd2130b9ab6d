#!/usr/bin/env python3
"""The import graph of Ferry's crates, read from the code's own paths, and its two rules.

Every `crate::`, `super::`, `self::` path (in `use` items and inline), and every path through a
child module, is resolved to the file that defines what it names (through `pub use`
re-exports). Test code (`#[cfg(test)]` items and modules) is left out: tests may reach anywhere.
The graph then has to hold two rules:

  1. No circle: between files, and between folders (a file's folder is its top-level module;
     `app::X` and `config::X` each count as their own). A file using what an ancestor module
     defines (`super::X`) is its folder's own business, not an edge in a circle.
  2. Arrows only downward: each file has a layer (the table LAYERS below, first matching
     prefix); an import from a lower layer to a higher one is refused.

    python3 scripts/layers.py              # check both crates; non-zero exit on a violation
    python3 scripts/layers.py --graph      # also print every edge, grouped by file
    python3 scripts/layers.py --layers     # print each file's layer
    python3 scripts/layers.py --prune-allow  # drop tolerated imports that are gone

Edges listed in `scripts/layers.allow` (one `from -> to` per line) are tolerated while they
are being removed; the list only ever shrinks, and an entry that no longer exists is an error.
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Layers, bottom (0) to top. A file takes the layer of the longest prefix of its module path
# (`a::b::c`) listed here. Same layer: allowed, as long as no circle forms.
LAYERS = {
    "ferry": [
        # common: addresses, ids, the config reader, buffers, wire formats of the API
        ("common", 0),
        ("pb", 0),
        # session / stats / policy / matchers
        ("session", 1),
        ("stats", 1),
        ("rejects", 1),
        ("app::policy", 1),
        ("policy", 1),
        ("matchers", 1),
        ("users", 1),
        ("counters", 1),
        ("sniffing", 1),
        # transport and its settings
        ("transport", 2),
        ("netstack", 2),
        ("config::stream", 2),
        ("config::sockopt", 2),
        ("config::tls", 2),
        ("config::reality", 2),
        ("config::xhttp", 2),
        ("config::headers", 2),
        ("config::quic", 2),
        ("config::kcp", 2),
        # relay
        ("relay", 3),
        # proxy protocols
        ("proxy", 4),
        # app services
        ("app", 5),
        ("app::dns", 5),
        ("app::router", 5),
        ("app::observatory", 5),
        ("app::sniff", 5),
        ("app::log", 5),
        ("app::mask", 5),
        ("registry", 5),
        ("app::metrics", 5),
        # dispatcher
        ("app::dispatcher", 6),
        # instance: what a running config is
        ("config", 7),
        ("config::services", 7),
        ("app::instance", 7),
        # api
        ("app::api", 8),
        # the binary
        ("main", 9),
        ("", 9),  # lib.rs
    ],
    # The lab has no layers of its own beyond its syscall module: it must only be free of
    # circles.
    "ferry-lab": [
        ("sys", 0),
        ("", 9),
    ],
}

CRATES = {
    "ferry": "crates/ferry/src",
    "ferry-lab": "crates/ferry-lab/src",
}

ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:async\s+)?(?:const\s+)?"
    r"(?:struct|enum|trait|fn|type|const|static|union|mod)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
MACRO = re.compile(r"macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)
USE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
INLINE = re.compile(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def strip(src):
    """Source without comments, string and char literals (kept as empty quotes)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", src[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", src[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(s, i):
    """Index past the item starting at `i`: its `;` or its balanced `{...}`."""
    depth = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


TEST_ATTR = re.compile(r"#\[cfg\((?:test|all\(test[^\]]*|any\(test[^\]]*)\)\]")


def without_tests(s):
    """Drops items under `#[cfg(test)]` (and `cfg(any(test, ...))`); returns (code, test mods)."""
    test_mods = set()
    out = []
    i = 0
    while True:
        m = TEST_ATTR.search(s, i)
        if not m:
            out.append(s[i:])
            break
        out.append(s[i:m.start()])
        j = m.end()
        # Further attributes, then the item.
        while True:
            a = re.match(r"\s*#\[[^\]]*\]", s[j:])
            if not a:
                break
            j += a.end()
        d = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", s[j:])
        if d:
            test_mods.add(d.group(1))
        i = block_end(s, j)
    return "".join(out), test_mods


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of segments, () for the crate root
        self.file = file  # path relative to the crate's src
        self.items = set()
        self.children = set()
        self.reexports = {}  # name -> (module path, segments) of a `use`
        self.code = ""
        self.test = False


def load(crate):
    src = os.path.join(ROOT, CRATES[crate])
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                if crate == "ferry" and parts == ["main"]:
                    path = ("main",)  # the binary: its own crate, a node on top
                else:
                    path = ()
            else:
                path = tuple(parts)
            m = Module(path, rel)
            raw = strip(open(full, encoding="utf-8").read())
            code, test_mods = without_tests(raw)
            m.code = code
            m.test_children = test_mods
            mods[path] = m
    # Children, tests, items, re-exports.
    for path, m in mods.items():
        for c in MOD_DECL.findall(m.code):
            m.children.add(c)
        for c in m.test_children:
            child = mods.get(path + (c,))
            if child:
                child.test = True
        m.items.update(ITEM.findall(m.code))
        m.items.update(MACRO.findall(m.code))
    # A test module's descendants are test code too.
    for path, m in mods.items():
        for k in range(1, len(path)):
            p = mods.get(path[:k])
            if p and p.test:
                m.test = True
    for path, m in mods.items():
        for tree in USE.findall(m.code):
            t = re.sub(r"\bas\b", " as ", tree)
            t = re.sub(r"\s+as\s+", "as", t)
            for segs, alias in parse_use(t):
                if segs[-1] == "*":
                    continue
                m.reexports[alias] = segs
    return src, mods


def parse_use(t):
    """`use` tree (spaces around `as` folded to `as`) -> [(segments, alias)]."""
    t = re.sub(r"\s+", "", t)
    out = []

    def walk(prefix, body):
        parts, depth, cur = [], 0, ""
        for c in body:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            if c == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += c
        if cur:
            parts.append(cur)
        for p in parts:
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + [x for x in head.split("::") if x], rest[:-1])
                continue
            segs = [x for x in p.split("::") if x]
            alias = None
            if segs:
                last = segs[-1]
                m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*|\*)as([A-Za-z_][A-Za-z0-9_]*)$", last)
                if m and m.group(1) != "" and (m.group(1) + "as" + m.group(2)) == last and not last.startswith("as"):
                    # Ambiguous only for names containing "as" (e.g. `base`, `alias`): a real
                    # alias was written with spaces, which parse_use's caller turned into `as`
                    # between two names; accept when the rename target exists as a word.
                    segs[-1], alias = m.group(1), m.group(2)
            full = prefix + segs
            if full and full[-1] == "self":
                full = full[:-1]
            if full:
                out.append((full, alias or full[-1]))

    walk([], t)
    return out


def absolute(mods, at, segs):
    """Absolute module path segments for `segs` used in module `at` (None: not ours)."""
    segs = list(segs)
    if not segs:
        return None
    head = segs[0]
    if head == "crate":
        base = () if at != ("main",) else ("main",)
        return list(base) + segs[1:]
    if head in ("super", "self"):
        cur = list(at)
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                if not cur:
                    return None
                cur.pop()
            segs = segs[1:]
        return cur + segs
    if at == ("main",) and head == "ferry":
        return segs[1:]
    m = mods.get(tuple(at))
    if m and head in m.children:
        return list(at) + segs
    if m and head in m.reexports:
        target = m.reexports[head]
        if target[0] in ("crate", "super", "self") or (m and target[0] in m.children) or (at == ("main",) and target[0] == "ferry"):
            inner = absolute(mods, at, target)
            if inner is not None:
                return inner + segs[1:]
    return None


def resolve(mods, segs, depth=0):
    """The module (file) defining the item named by absolute `segs`."""
    cur = ()
    i = 0
    while i < len(segs):
        m = mods.get(cur)
        nxt = cur + (segs[i],)
        if nxt in mods:
            cur = nxt
            i += 1
            continue
        if m is None:
            return None
        name = segs[i]
        if name in m.items or depth > 8:
            return cur
        if name in m.reexports:
            target = absolute(mods, cur, m.reexports[name])
            if target is not None:
                r = resolve(mods, target + segs[i + 1:], depth + 1)
                return r if r is not None else cur
        return cur
    return cur


def graph(crate):
    src, mods = load(crate)
    edges = defaultdict(set)
    for path, m in mods.items():
        if m.test:
            continue
        refs = []
        for tree in USE.findall(m.code):
            t = re.sub(r"\bas\b", " as ", tree)
            t = re.sub(r"\s+as\s+", "as", t)
            for segs, _ in parse_use(t):
                refs.append(segs if segs[-1] != "*" else segs[:-1])
        code_wo_use = USE.sub("", m.code)
        for p in INLINE.findall(code_wo_use):
            refs.append(p.split("::"))
        # Paths through a child module (`copy::CopyDir`) or a `use`d name (`head::HeadReader`).
        for p in re.findall(r"(?<![A-Za-z0-9_:])([a-z_][a-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+)", code_wo_use):
            first = p.split("::")[0]
            if first in m.children or (first in m.reexports and first not in ("crate", "super", "self")):
                refs.append(p.split("::"))
        for segs in refs:
            a = absolute(mods, path, segs)
            if a is None:
                continue
            target = resolve(mods, a)
            if target is None or target == path:
                continue
            t = mods[target]
            if t.test:
                continue
            # A parent naming its child module (declaring or re-exporting it) is no import.
            edges[path].add(target)
    # A parent's `pub use child::X` re-export is resolved through, not an edge of its own;
    # but mod.rs files that only declare/re-export keep no edge to their children either.
    for path in list(edges):
        m = mods[path]
        for t in list(edges[path]):
            if t[: len(path)] == path and len(t) == len(path) + 1 and only_reexports(m, t[-1]):
                edges[path].discard(t)
    return mods, edges


def only_reexports(m, child):
    """Whether `m` names `child` only in `mod`/`use` items (no code path through it)."""
    code = USE.sub("", m.code)
    code = MOD_DECL.sub("", code)
    return re.search(r"(?<![A-Za-z0-9_:])" + re.escape(child) + r"::", code) is None


def name(path):
    return "::".join(path) if path else "(root)"


def layer_of(crate, path):
    best, layer = -1, None
    key = "::".join(path)
    for prefix, l in LAYERS[crate]:
        if prefix == "":
            if best < 0 and path == ():
                best, layer = 0, l
            continue
        if key == prefix or key.startswith(prefix + "::"):
            if len(prefix) > best:
                best, layer = len(prefix), l
    if layer is None:
        # A crate whose table lists only some files: the rest sit in one middle layer.
        layer = 5
    return layer


def folder(path):
    """A file's folder: its top-level module; `app` and `config` hold modules of several
    layers (services to the API; transport settings to the whole config), so each of their
    modules counts as a folder of its own."""
    if not path:
        return "(root)"
    if path[0] in ("app", "config") and len(path) > 1:
        return path[0] + "::" + path[1]
    return path[0]


def sccs(nodes, edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check(crate, show_graph, show_layers, allowed):
    mods, edges = graph(crate)
    problems = []
    seen_allowed = set()
    nodes = [p for p, m in mods.items() if not m.test]
    if show_layers:
        for p in sorted(nodes):
            print(f"{crate}: {layer_of(crate, p)} {name(p)}")
    if show_graph:
        for p in sorted(edges):
            print(f"{crate}: {name(p)} -> {', '.join(sorted(name(t) for t in edges[p]))}")

    def bad(kind, a, b, text):
        key = f"{crate}: {name(a)} -> {name(b)}"
        if key in allowed:
            seen_allowed.add(key)
            return
        problems.append(f"{kind}: {text}")

    for a in sorted(edges):
        for b in sorted(edges[a]):
            la, lb = layer_of(crate, a), layer_of(crate, b)
            if lb > la:
                bad("upward", a, b, f"{crate}: {name(a)} (layer {la}) imports {name(b)} (layer {lb})")
    # File circles: each reported with the edges that close it. A file using what an ancestor
    # module defines (`super::X`, the shared types of its folder's mod.rs) is the folder's own
    # business and no edge here; every other circle is refused.
    fe = {a: {b for b in bs if b != a[: len(b)]} for a, bs in edges.items()}
    for comp in sccs(nodes, fe):
        inner = [(a, b) for a in comp for b in fe.get(a, ()) if b in comp]
        left = [(a, b) for a, b in inner if f"{crate}: {name(a)} -> {name(b)}" not in allowed]
        for a, b in inner:
            k = f"{crate}: {name(a)} -> {name(b)}"
            if k in allowed:
                seen_allowed.add(k)
        # The circle stands unless every edge of it that still breaks it is allowed.
        g = defaultdict(set)
        for a, b in left:
            g[a].add(b)
        if sccs(comp, g):
            problems.append(
                f"circle: {crate}: " + ", ".join(name(p) for p in comp)
                + "\n    edges: " + "; ".join(f"{name(a)} -> {name(b)}" for a, b in sorted(left))
            )
    # Folder circles.
    fold = defaultdict(set)
    via = defaultdict(list)
    for a, bs in edges.items():
        for b in bs:
            fa, fb = folder(a), folder(b)
            if fa != fb and f"{crate}: {name(a)} -> {name(b)}" not in allowed:
                fold[fa].add(fb)
                via[(fa, fb)].append(f"{name(a)} -> {name(b)}")
    for comp in sccs({folder(p) for p in nodes}, fold):
        detail = "; ".join(
            f"{x}->{y} ({via[(x, y)][0]}{' +' + str(len(via[(x, y)]) - 1) if len(via[(x, y)]) > 1 else ''})"
            for x in comp for y in sorted(fold[x]) if y in comp
        )
        problems.append(f"folder circle: {crate}: {', '.join(comp)}\n    {detail}")
    exists = {f"{crate}: {name(a)} -> {name(b)}" for a, bs in edges.items() for b in bs}
    needed = needed_edges(crate, mods, edges)
    stale = sorted(k for k in allowed if k.startswith(crate + ":") and k not in needed)
    return problems, stale, sum(len(v) for v in edges.values()), len(nodes)


def needed_edges(crate, mods, edges):
    """The edges that break a rule when nothing is allowed: upward ones, those inside a file
    circle, and those that make a folder circle."""
    key = lambda a, b: f"{crate}: {name(a)} -> {name(b)}"
    nodes = [p for p, m in mods.items() if not m.test]
    out = set()
    fe = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if layer_of(crate, b) > layer_of(crate, a):
                out.add(key(a, b))
            if b != a[: len(b)]:
                fe[a].add(b)
    for comp in sccs(nodes, fe):
        c = set(comp)
        out |= {key(a, b) for a in comp for b in fe.get(a, ()) if b in c}
    fold = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if folder(a) != folder(b):
                fold[folder(a)].add(folder(b))
    for comp in sccs({folder(p) for p in nodes}, fold):
        c = set(comp)
        out |= {key(a, b) for a, bs in edges.items() for b in bs
                if folder(a) in c and folder(b) in c and folder(a) != folder(b)}
    return out


def back_edges(nodes, edges):
    """Edges whose removal leaves `edges` without a circle (a DFS's back edges)."""
    state, out = {}, []
    sys.setrecursionlimit(10000)

    def visit(v):
        state[v] = 1
        for w in sorted(edges.get(v, ())):
            if state.get(w) == 1:
                out.append((v, w))
            elif w not in state:
                visit(w)
        state[v] = 2

    for v in sorted(nodes):
        if v not in state:
            visit(v)
    return out


def today(crate):
    """The violations of today, as the allow lines that tolerate them."""
    mods, edges = graph(crate)
    nodes = [p for p, m in mods.items() if not m.test]
    lines = set()
    key = lambda a, b: f"{crate}: {name(a)} -> {name(b)}"
    rest = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if layer_of(crate, b) > layer_of(crate, a):
                lines.add(key(a, b))
            elif b != a[: len(b)]:
                rest[a].add(b)
    for a, b in back_edges(nodes, rest):
        lines.add(key(a, b))
        rest[a].discard(b)
    fold = defaultdict(set)
    via = defaultdict(list)
    for a, bs in edges.items():
        for b in bs:
            if key(a, b) in lines:
                continue
            fa, fb = folder(a), folder(b)
            if fa != fb:
                fold[fa].add(fb)
                via[(fa, fb)].append((a, b))
    for fa, fb in back_edges({folder(p) for p in nodes}, fold):
        for a, b in via[(fa, fb)]:
            lines.add(key(a, b))
    return sorted(lines)


def main():
    args = sys.argv[1:]
    if "--write-allow" in args:
        with open(os.path.join(ROOT, "scripts", "layers.allow"), "w", encoding="utf-8") as f:
            f.write("# Imports that break the layer rules today, tolerated while they are removed.\n")
            f.write("# This list only shrinks: `python3 scripts/layers.py` fails on a new violation\n")
            f.write("# and on an entry that no longer exists.\n")
            for crate in CRATES:
                for line in today(crate):
                    f.write(line + "\n")
        return 0
    allow_file = os.path.join(ROOT, "scripts", "layers.allow")
    allowed = set()
    if os.path.exists(allow_file):
        for line in open(allow_file, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(line)
    if "--prune-allow" in args:
        exists = set()
        for crate in CRATES:
            mods, edges = graph(crate)
            exists |= needed_edges(crate, mods, edges)
        lines = open(allow_file, encoding="utf-8").read().splitlines(keepends=True)
        keep = [l for l in lines if not l.split("#", 1)[0].strip() or l.split("#", 1)[0].strip() in exists]
        with open(allow_file, "w", encoding="utf-8") as f:
            f.writelines(keep)
        print(f"scripts/layers.allow: {len(lines) - len(keep)} gone, {len(keep)} lines left")
        allowed = {l.split("#", 1)[0].strip() for l in keep} - {""}
    failed = False
    for crate in CRATES:
        problems, stale, n_edges, n_files = check(crate, "--graph" in args, "--layers" in args, allowed)
        status = "ok" if not problems and not stale else "FAILED"
        print(f"{crate}: {n_files} files, {n_edges} imports between files: {status}")
        for p in problems:
            print("  " + p)
        for s in stale:
            print(f"  allowed but no longer needed (remove it from scripts/layers.allow): {s}")
        failed |= bool(problems or stale)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
