#!/usr/bin/python3
"""Checks every #include of the tracked C++ and CUDA sources against the include graph.

The graph is the fenced `include-graph` block of docs/ARCHITECTURE.md (section "Include
graph"), so the document and the check cannot disagree. Each file belongs to the module of the
longest listed folder that holds it; each quoted or angled include names a module (by its folder,
or by an alias such as the generated kvtier/v1/ headers), a third-party library (by its include
prefixes), or neither (the C++ and system headers, which are not checked). The check fails,
naming file:line and the edge, on

  - an include whose edge (module -> module, or module -> library) the graph does not list;
  - a quoted include of a path that is neither a module, an alias nor a library (a new folder
    or library must be placed in the graph first);
  - in a .cu or .cuh file, an include the graph forbids there (Abseil, Protobuf);
  - a tracked source that belongs to no module;
  - an edge the graph lists that no include uses any more (the graph would say more than the code).

Usage: check-includes.py [--root DIR]. Exit status 0 when clean, 1 otherwise, 77 (skipped) outside
a git checkout. Standard library only; reads the file list from `git ls-files`.
"""

import argparse
import collections
import os
import re
import subprocess
import sys

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
CUDA_SUFFIXES = (".cu", ".cuh")
DOC = "docs/ARCHITECTURE.md"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


class Graph:
    def __init__(self):
        self.modules = {}  # folder -> set of allowed dependencies (modules and libraries)
        self.edge_lines = {}  # (module, dependency) -> line of the document
        self.libraries = {}  # name -> include prefixes
        self.aliases = []  # (include prefix, module)
        self.everywhere = set()  # libraries every module may include
        self.cuda_forbidden = []  # include prefixes no .cu/.cuh file may use
        self.anything = set()  # modules that may include anything ("*")


def parse_graph(path):
    """Reads the include-graph block of `path`; raises ValueError naming the line when malformed."""
    graph = Graph()
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = lines.index("```include-graph")
    except ValueError:
        raise ValueError(f"{path}: no ```include-graph block") from None
    for number in range(start + 1, len(lines)):
        line = lines[number].split("#", 1)[0].strip()
        where = f"{path}:{number + 1}"
        if lines[number].strip() == "```":
            break
        if not line:
            continue
        head, sep, rest = line.partition(":")
        if not sep:
            raise ValueError(f"{where}: expected 'NAME: ...'")
        words = rest.split()
        head = head.strip()
        if head.startswith("library "):
            graph.libraries[head.split(None, 1)[1]] = words
        elif head.startswith("alias "):
            if len(words) != 1:
                raise ValueError(f"{where}: an alias names one module")
            graph.aliases.append((head.split(None, 1)[1], words[0]))
        elif head == "everywhere":
            graph.everywhere.update(words)
        elif head == "cuda-forbids":
            graph.cuda_forbidden.extend(words)
        else:
            deps = graph.modules.setdefault(head, set())
            for word in words:
                if word == "*":
                    graph.anything.add(head)
                    continue
                deps.add(word)
                graph.edge_lines[(head, word)] = where
    else:
        raise ValueError(f"{path}: the include-graph block is not closed")
    known = set(graph.modules) | set(graph.libraries)
    for (module, dep), where in graph.edge_lines.items():
        if dep not in known:
            raise ValueError(f"{where}: {module} -> {dep}: {dep} is neither a module nor a library")
    for prefix, module in graph.aliases:
        if module not in graph.modules:
            raise ValueError(f"{path}: alias {prefix} names {module}, which is not a module")
    return graph


def module_of(graph, path):
    best = None
    for folder in graph.modules:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def target_of(graph, include):
    """The module or library `include` names, or None (a standard or system header)."""
    for prefix, module in graph.aliases:
        if include.startswith(prefix):
            return module
    module = module_of(graph, include)
    if module is not None:
        return module
    for name, prefixes in graph.libraries.items():
        if any(include.startswith(p) for p in prefixes):
            return name
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parser.parse_args()
    os.chdir(args.root)
    try:
        graph = parse_graph(DOC)
    except (OSError, ValueError) as e:
        print(f"check-includes: {e}", file=sys.stderr)
        return 1
    listing = subprocess.run(["git", "ls-files", "-z", "--"] + [f"*{s}" for s in SOURCE_SUFFIXES],
                             capture_output=True, text=True)
    if listing.returncode != 0:
        # A source tree without its history (an unpacked archive) has no list of tracked files.
        print(f"check-includes: not a git checkout, skipped ({listing.stderr.strip()})")
        return 77
    files = listing.stdout.split("\0")
    errors = []
    used = collections.defaultdict(set)
    for path in sorted(f for f in files if f.endswith(SOURCE_SUFFIXES)):
        module = module_of(graph, path)
        if module is None:
            errors.append(f"{path}: belongs to no module of the include graph ({DOC})")
            continue
        allowed = graph.modules[module] | graph.everywhere
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE_RE.match(line)
                if not match:
                    continue
                quote, include = match.groups()
                where = f"{path}:{number}"
                if path.endswith(CUDA_SUFFIXES) and any(
                        include.startswith(p) for p in graph.cuda_forbidden):
                    errors.append(f"{where}: a CUDA source includes \"{include}\" (forbidden in "
                                  f".cu/.cuh files by {DOC})")
                    continue
                target = target_of(graph, include)
                if target is None:
                    if quote == '"' and "/" in include:
                        errors.append(f"{where}: \"{include}\" is in no module or library of "
                                      f"the include graph ({DOC})")
                    continue
                if target == module:
                    continue
                used[module].add(target)
                if module in graph.anything or target in allowed:
                    continue
                errors.append(f"{where}: {module} -> {target} (#include \"{include}\") is not "
                              f"in the include graph ({DOC})")
    for (module, dep), where in sorted(graph.edge_lines.items()):
        if dep not in used[module]:
            errors.append(f"{where}: {module} -> {dep} is listed but no file of {module} "
                          f"includes {dep}; remove the edge")
    for error in errors:
        print(error, file=sys.stderr)
    if errors:
        print(f"check-includes: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
