#!/usr/bin/python3
"""Checks deploy/grafana/kvtier.json against a real kvtierd.

- The JSON is a Grafana dashboard: a schemaVersion, a title and uid, a `datasource` variable of
  type datasource (Prometheus) and an `instance` variable; every panel that is not a row has
  targets with an expression; panel ids are unique; every panel and target uses the datasource
  through the variable; panels fit the 24-column grid.
- Every metric name in a panel or variable expression (identifiers that start with kvtier_; a
  histogram's _bucket, _sum and _count map to its family) is exported by the /metrics endpoint of
  a kvtierd started here (a `# TYPE` line counts, even without samples). A dashboard that names
  no metric fails.
- Every expression parses as PromQL (`promtool check rules` on recording rules made of them, with
  $__rate_interval and $instance substituted), where promtool is installed.
- kvtierd stops with exit status 0 on SIGTERM.

usage: test_grafana_dashboard.py --dashboard FILE --kvtierd PATH
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
DATASOURCE_UIDS = ("${datasource}", "$datasource")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class Checker:
    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, ok, message):
        if ok:
            self.passed += 1
        else:
            self.failures.append(message)
        return ok


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels") or [])


def uses_variable(ds):
    if isinstance(ds, str):
        return ds in DATASOURCE_UIDS
    return isinstance(ds, dict) and ds.get("uid") in DATASOURCE_UIDS


def metric_names(expr):
    """kvtier_ identifiers of a PromQL expression, outside string literals (label values)."""
    return {m for m in IDENT.findall(STRING.sub(" ", expr)) if m.startswith("kvtier_")}


def check_dashboard(c, dash, exprs):
    """Structure checks; appends (where, expr) of every target to `exprs`. Returns
    {metric name: [where it is used]}."""
    used = {}

    def note(expr, where):
        for name in metric_names(expr):
            used.setdefault(name, []).append(where)

    c.check(isinstance(dash.get("schemaVersion"), int) and dash["schemaVersion"] >= 36,
            f"schemaVersion {dash.get('schemaVersion')} (expected >= 36)")
    c.check(isinstance(dash.get("title"), str) and dash["title"], "no title")
    c.check(isinstance(dash.get("uid"), str) and 0 < len(dash["uid"]) <= 40,
            "no uid, or longer than Grafana's 40 characters")
    variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list") or []}
    ds_var = variables.get("datasource") or {}
    c.check(ds_var.get("type") == "datasource" and ds_var.get("query") == "prometheus",
            "no `datasource` variable of type datasource with query prometheus")
    inst = variables.get("instance")
    if c.check(inst is not None, "no `instance` variable"):
        c.check(uses_variable(inst.get("datasource")),
                "the instance variable does not query ${datasource}")
        query = inst.get("query")
        query = query.get("query", "") if isinstance(query, dict) else str(query or "")
        c.check("instance" in query, f"the instance variable's query {query!r} is not about "
                "the instance label")
    for name, v in variables.items():
        if v.get("type") == "query":
            q = v.get("query")
            note(q.get("query", "") if isinstance(q, dict) else str(q or ""), f"variable {name}")
            note(str(v.get("definition", "")), f"variable {name}")

    panels = list(all_panels(dash.get("panels") or []))
    c.check(panels, "no panels")
    ids = [p.get("id") for p in panels]
    c.check(all(isinstance(i, int) for i in ids), "a panel without an integer id")
    dupes = sorted({i for i in ids if ids.count(i) > 1 and i is not None})
    c.check(not dupes, f"panel ids used twice: {dupes}")
    for p in panels:
        where = f"panel {p.get('id')} {p.get('title')!r}"
        grid = p.get("gridPos") or {}
        c.check(all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")) and
                grid.get("x", 0) + grid.get("w", 0) <= 24, f"{where}: gridPos {grid}")
        if p.get("type") == "row":
            continue
        c.check(p.get("title"), f"{where}: no title")
        c.check(uses_variable(p.get("datasource")),
                f"{where}: datasource {p.get('datasource')} is not the ${{datasource}} variable")
        targets = p.get("targets") or []
        c.check(targets, f"{where}: no targets")
        ref_ids = [t.get("refId") for t in targets]
        c.check(len(set(ref_ids)) == len(ref_ids), f"{where}: refIds used twice")
        for t in targets:
            expr = t.get("expr")
            if not c.check(isinstance(expr, str) and expr.strip(),
                           f"{where}: target {t.get('refId')} has no expr"):
                continue
            c.check(uses_variable(t.get("datasource", p.get("datasource"))),
                    f"{where}: target {t.get('refId')} does not use ${{datasource}}")
            c.check('instance=~"$instance"' in expr,
                    f"{where}: target {t.get('refId')} ignores the instance variable: {expr}")
            c.check(expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"),
                    f"{where}: unbalanced brackets in {expr}")
            note(expr, where)
            exprs.append((f"{where} target {t.get('refId')}", expr))
    c.check(used, "the dashboard references no kvtier_ metric at all")
    return used


def check_promql(c, exprs, tmp):
    """Parses every expression with promtool, as recording rules. Skipped without promtool."""
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool not installed: PromQL syntax not checked")
        return
    rules = []
    for i, (_, expr) in enumerate(exprs):
        concrete = expr.replace("$__rate_interval", "5m").replace("$instance", ".*")
        rules.append({"record": f"kvtier:dashboard_expr_{i}", "expr": concrete})
    path = os.path.join(tmp, "dashboard-rules.json")  # JSON is YAML
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    run = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True,
                         timeout=60)
    if not c.check(run.returncode == 0, "promtool check rules refuses a dashboard expression:\n"
                   + (run.stdout + run.stderr).strip()):
        for i, (where, expr) in enumerate(exprs):
            if f"dashboard_expr_{i}" in run.stdout + run.stderr:
                print(f"  expression {i}: {where}: {expr}")


def start_kvtierd(kvtierd, tmp):
    log_path = os.path.join(tmp, "kvtierd.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [kvtierd, f"--state-dir={tmp}/state", f"--socket={tmp}/kvtier.sock",
         "--set=host.capacity=64MiB", "--set=host.chunk=4MiB", "--set=host.pin=none",
         "--set=disk.capacity=64MiB", "--set=disk.chunk=4MiB",
         f"--set=pools.allowed_dirs=[{tmp}]", "--set=metrics.listen=127.0.0.1:0",
         "--set=server.workers=2"],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    # metrics.listen port 0: the daemon picks a free port and logs it in its ready line.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        m = re.search(r"kvtierd ready: .*metrics on http://([0-9.]+:\d+)", text)
        if m:
            return proc, m.group(1), log_path
        if proc.poll() is not None:
            raise RuntimeError(f"kvtierd exited with {proc.returncode} at start:\n{text}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"kvtierd did not log its ready line within 30 s:\n{text}")


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def exported_families(text):
    """{family: type} from # TYPE lines, plus sample names without one (type 'untyped')."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                families[parts[2]] = parts[3]
        elif line and not line.startswith("#"):
            name = IDENT.match(line)
            if name:
                families.setdefault(name.group(0), "untyped")
    return families


def exported(name, families):
    if name in families:
        return True
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            kind = families.get(base)
            if kind == "histogram" or (kind == "summary" and suffix != "_bucket"):
                return True
    return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--kvtierd", required=True)
    args = parser.parse_args()
    c = Checker()
    with open(args.dashboard, encoding="utf-8") as f:
        try:
            dash = json.load(f)
        except json.JSONDecodeError as e:
            print(f"FAIL: {args.dashboard} is not JSON: {e}")
            return 1
    exprs = []
    used = check_dashboard(c, dash, exprs)

    tmp = tempfile.mkdtemp(prefix="kvtier-grafana-")
    proc = None
    try:
        check_promql(c, exprs, tmp)
        proc, address, log_path = start_kvtierd(args.kvtierd, tmp)
        status, _ = get(f"http://{address}/readyz")
        c.check(status == 200, f"/readyz answered {status}")
        status, text = get(f"http://{address}/metrics")
        c.check(status == 200, f"/metrics answered {status}")
        families = exported_families(text)
        c.check(families, "/metrics exported no metric family")
        for name in sorted(used):
            c.check(exported(name, families),
                    f"{name} (used by {', '.join(sorted(set(used[name]))[:3])}) is not "
                    f"exported by kvtierd's /metrics")
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            c.check(False, "kvtierd did not stop within 30 s of SIGTERM")
        c.check(code == 0, f"kvtierd exited with {code} after SIGTERM")
        if c.failures:
            with open(log_path, "rb") as f:
                print("kvtierd log:\n" + f.read().decode("utf-8", "replace"))
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    for f in c.failures:
        print("FAIL:", f)
    print(f"{c.passed} checks passed, {len(c.failures)} failed; the dashboard uses "
          f"{len(used)} metric names: {', '.join(sorted(used))}")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
