#!/usr/bin/python3
"""Writes the code examples of Markdown documents to files, so the tests compile and run exactly
the code the documentation shows. An example is a fenced code block preceded by a line
`<!-- example: NAME -->`; it is written to OUT/NAME. Two examples with one name, or a marker not
followed by a fenced block, are errors (exit 1).

Usage: extract_examples.py --out DIR DOC.md [DOC.md...]
"""

import argparse
import os
import re
import sys

MARKER = re.compile(r"^<!-- example: ([A-Za-z0-9_.-]+) -->\s*$")


def extract(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    examples = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            i += 1
            continue
        name = m.group(1)
        j = i + 1
        if j >= len(lines) or not lines[j].startswith("```"):
            sys.exit(f"{path}:{i + 1}: example '{name}' is not followed by a fenced code block")
        body = []
        k = j + 1
        while k < len(lines) and not lines[k].startswith("```"):
            body.append(lines[k])
            k += 1
        if k >= len(lines):
            sys.exit(f"{path}:{j + 1}: example '{name}': the code block does not end")
        examples.append((name, "\n".join(body) + "\n", f"{path}:{j + 1}"))
        i = k + 1
    return examples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("docs", nargs="+")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    seen = {}
    for doc in args.docs:
        for name, body, where in extract(doc):
            if name in seen:
                sys.exit(f"{where}: example '{name}' already defined at {seen[name]}")
            seen[name] = where
            with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
                f.write(body)
            print(f"{name}  ({where})")
    if not seen:
        sys.exit("no examples found")


if __name__ == "__main__":
    main()
