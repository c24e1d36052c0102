#!/usr/bin/python3
"""scripts/check-includes.py on small git trees of its own: a clean tree passes, and each kind of
violation fails naming file:line and the edge. Usage: check_includes_test.py SCRIPT."""

import os
import subprocess
import sys
import tempfile

GRAPH = """# Architecture

```include-graph
library abseil: absl/
library yaml-cpp: yaml-cpp/
alias lib/v1/: proto
everywhere: abseil
cuda-forbids: absl/
base:
proto: base
top: base proto yaml-cpp
```
"""

CLEAN = {
    "docs/ARCHITECTURE.md": GRAPH,
    "base/a.h": '#include <string>\n#include "absl/status/status.h"\n',
    "base/k.cu": '#include "base/a.h"\n',
    "proto/p.h": '#include "base/a.h"\n',
    "top/t.cc": '#include "top/t.h"\n#include "lib/v1/x.pb.h"\n#include "base/a.h"\n'
                '#include "yaml-cpp/yaml.h"\n',
    "top/t.h": "",
}


def run(script, files):
    """(exit status, stderr) of the script on a new git tree holding `files`."""
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        subprocess.run(["git", "init", "-q", root], check=True)
        subprocess.run(["git", "-C", root, "add", "."], check=True)
        done = subprocess.run([sys.executable, script, "--root", root], capture_output=True,
                              text=True)
        return done.returncode, done.stderr


def main():
    script = os.path.abspath(sys.argv[1])
    failures = []

    def expect(name, files, status, *texts):
        code, err = run(script, files)
        if code != status or any(t not in err for t in texts):
            failures.append(f"{name}: exit {code} (want {status}), stderr:\n{err}")

    expect("clean", CLEAN, 0)
    expect("upward edge", {**CLEAN, "base/b.cc": '#include "base/a.h"\n#include "top/t.h"\n'}, 1,
           'base/b.cc:2: base -> top (#include "top/t.h") is not in the include graph')
    expect("library", {**CLEAN, "proto/q.cc": '#include "yaml-cpp/yaml.h"\n'}, 1,
           "proto/q.cc:1: proto -> yaml-cpp")
    expect("cuda", {**CLEAN, "base/k.cu": '#include "absl/status/status.h"\n'}, 1,
           'base/k.cu:1: a CUDA source includes "absl/status/status.h"')
    expect("unknown folder", {**CLEAN, "top/u.cc": '#include "elsewhere/e.h"\n'}, 1,
           'top/u.cc:1: "elsewhere/e.h" is in no module or library')
    expect("no module", {**CLEAN, "stray/s.cc": ""}, 1, "stray/s.cc: belongs to no module")
    expect("unused edge", {**CLEAN, "top/t.cc": '#include "base/a.h"\n#include "yaml-cpp/y.h"\n'},
           1, "top -> proto is listed but no file of top includes proto")
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"{7 - len(failures)} of 7 cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
