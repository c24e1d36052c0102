#!/usr/bin/python3
"""Checks the Helm chart deploy/helm/kvtier with helm itself, and against deploy/kubernetes.

- `helm lint --strict` accepts the chart, with the default values and with every scenario below.
- In sync: `helm template` of the defaults (release kvtier, namespace kvtier-system, with the
  Namespace object) renders the same objects as the kustomization (`kubectl kustomize`, or its
  files where no kubectl is given), field by field; only Helm's own labels
  (app.kubernetes.io/instance, managed-by, version, helm.sh/chart) and the pod template's
  checksum/config annotation may differ, and the ConfigMap's kvtierd.yaml is compared as YAML.
- Scenarios (tier sizes, disk directories, GPU selection, authentication, TLS, ServiceMonitor
  labels, another release name, extra configuration fields) render objects that pass every check
  of tests/deploy/kubernetes/test_kubernetes_manifests.py (kvtierctl config validate included, with
  generated tokens, certificates and keys standing in for the Secrets), and show what the values
  asked for.
- Values kvtierd would refuse (a host tier above 90% of the memory limit, TLS without a
  certificate) make helm fail with a message naming the value.

Every failed check is printed; the exit status is 1 when any failed.

usage: test_helm_chart.py --helm PATH --chart DIR --manifests DIR --kvtierctl PATH --version V
                          [--kubectl PATH]
"""

import argparse
import copy
import os
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kubernetes"))
import test_kubernetes_manifests as km  # noqa: E402

HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by",
               "app.kubernetes.io/version", "helm.sh/chart")


def helm(args, *argv):
    return subprocess.run([args.helm, *argv], capture_output=True, text=True, timeout=120)


def render(c, args, name, release="kvtier", namespace="kvtier-system", values=(), sets=()):
    """The objects of `helm template`, or None when helm fails (a failed check)."""
    argv = ["template", release, args.chart, "--namespace", namespace]
    for v in values:
        argv += ["-f", v]
    for s in sets:
        argv += ["--set", s]
    run = helm(args, *argv)
    if not c.check(run.returncode == 0, f"{name}: helm template exited {run.returncode}: "
                                        f"{run.stderr.strip()}"):
        return None
    lint = helm(args, "lint", "--strict", args.chart, *argv[3:])
    c.check(lint.returncode == 0, f"{name}: helm lint --strict: {lint.stdout.strip()} "
                                  f"{lint.stderr.strip()}")
    return [d for d in yaml.safe_load_all(run.stdout) if d is not None]


def kustomize_objects(c, args):
    if args.kubectl:
        run = subprocess.run([args.kubectl, "kustomize", args.manifests], capture_output=True,
                             text=True, timeout=120)
        if c.check(run.returncode == 0, f"kubectl kustomize exited {run.returncode}: "
                                        f"{run.stderr.strip()}"):
            return [d for d in yaml.safe_load_all(run.stdout) if d is not None]
        return []
    # Without kubectl: the kustomization only lists resources, so its output is those files.
    with open(os.path.join(args.manifests, "kustomization.yaml"), encoding="utf-8") as f:
        k = yaml.safe_load(f)
    c.check(set(k) == {"apiVersion", "kind", "resources"},
            f"kustomization.yaml has fields besides resources ({sorted(k)}): compare with "
            f"kubectl kustomize")
    objects = []
    for r in k.get("resources") or []:
        with open(os.path.join(args.manifests, r), encoding="utf-8") as f:
            objects += [d for d in yaml.safe_load_all(f) if d is not None]
    return objects


def normalize(obj):
    """An object without Helm's labels and annotations, its kvtierd.yaml parsed."""
    obj = copy.deepcopy(obj)

    def strip(labels):
        if isinstance(labels, dict):
            for k in HELM_LABELS:
                labels.pop(k, None)

    def walk(node):
        if isinstance(node, dict):
            for key in ("labels", "matchLabels"):
                strip(node.get(key))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(obj)
    if obj.get("kind") == "Service":
        strip((obj.get("spec") or {}).get("selector"))
    template = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
    annotations = template.get("annotations") or {}
    annotations.pop("checksum/config", None)
    if "annotations" in template and not annotations:
        del template["annotations"]
    if obj.get("kind") == "ConfigMap" and "kvtierd.yaml" in (obj.get("data") or {}):
        obj["data"]["kvtierd.yaml"] = yaml.safe_load(obj["data"]["kvtierd.yaml"])
    return obj


def differences(a, b, path=""):
    """Paths where two YAML trees differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append(f"{path}.{k}: only in the chart: {b[k]!r}")
            elif k not in b:
                out.append(f"{path}.{k}: only in deploy/kubernetes: {a[k]!r}")
            else:
                out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: deploy/kubernetes {a!r}, chart {b!r}"]


def check_sync(c, args):
    chart = render(c, args, "defaults", sets=["namespace.create=true"])
    kust = kustomize_objects(c, args)
    if chart is None:
        return
    key = lambda o: (o.get("kind"), (o.get("metadata") or {}).get("name"))  # noqa: E731
    chart_by, kust_by = {key(o): o for o in chart}, {key(o): o for o in kust}
    c.check(set(chart_by) == set(kust_by),
            f"sync: the chart renders {sorted(chart_by)}, deploy/kubernetes has {sorted(kust_by)}")
    for k in sorted(set(chart_by) & set(kust_by)):
        diff = differences(normalize(kust_by[k]), normalize(chart_by[k]))
        c.check(not diff, f"sync: {k[0]}/{k[1]} differs between deploy/kubernetes and the "
                          f"chart's defaults:\n  " + "\n  ".join(diff))
    # Helm's selectors add the instance label; the pods carry every selector label.
    ds = chart_by.get(("DaemonSet", "kvtierd"))
    if ds:
        sel = ds["spec"]["selector"]["matchLabels"]
        c.check(sel.get("app.kubernetes.io/instance") == "kvtier",
                "chart: the DaemonSet's selector lacks app.kubernetes.io/instance")


def make_secret_files(tmp):
    """Stand-ins for the Secrets of the auth and TLS scenario: a tokens file, a CA, a server
    certificate and key signed by it."""
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("admin sha256:" + "a" * 64 + "\n")
    key, crt = os.path.join(tmp, "tls.key"), os.path.join(tmp, "tls.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=kvtierd-grpc.kvtier-system.svc", "-keyout", key, "-out", crt],
                   check=True, capture_output=True)
    return {"/etc/kvtier-auth/tokens": tokens, "/etc/kvtier-tls/tls.crt": crt,
            "/etc/kvtier-tls/tls.key": key, "/etc/kvtier-client-ca/ca.crt": crt}


def daemon_parts(ds):
    pod = ds["spec"]["template"]["spec"]
    ctr = next(x for x in pod["containers"] if x["name"] == "kvtierd")
    return pod, ctr


def secret_file_mounted(pod, ctr, path, secret):
    """`path` lies in a volumeMount of a secret volume of `secret`."""
    m = km.mount_for(ctr, path)
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    return bool(m) and (vols.get(m["name"], {}).get("secret") or {}).get("secretName") == secret


def scenario(c, args, name, files=None, servicemonitor=True, **kw):
    objects = render(c, args, name, **kw)
    if objects is None:
        return None, None, []
    before = len(c.failures)
    config, ds = km.check_objects(c, [("render", o) for o in objects], args.kvtierctl,
                                  files=files, servicemonitor=servicemonitor)
    c.failures[before:] = [f"{name}: {f}" for f in c.failures[before:]]
    return config, ds, objects


def check_scenarios(c, args, tmp):
    # Defaults in another release and namespace: consistent names and selectors.
    config, ds, objects = scenario(c, args, "release cache", release="cache", namespace="ml")
    if ds:
        c.check(ds["metadata"]["name"] == "cache-kvtierd",
                f"release cache: DaemonSet {ds['metadata']['name']}, not cache-kvtierd")
        c.check(not any(o["kind"] == "Namespace" for o in objects),
                "release cache: a Namespace without namespace.create")

    # Larger tiers, a disk directory, a GPU tier and GPU selection; no ServiceMonitor.
    big = ["tiers.host.capacityGiB=128", "tiers.host.memoryOverheadGiB=16",
           "tiers.disk.capacity=2TiB", "tiers.disk.dirs={/mnt/nvme0/kvtier}",
           "tiers.gpu.capacity=8GiB", "tiers.gpu.device=1", "gpu.visibleDevices=0\\,1",
           "gpu.runtimeClassName=nvidia", "serviceMonitor.enabled=false", "cpu=8"]
    config, ds, _ = scenario(c, args, "big tiers", sets=big, servicemonitor=False)
    if ds and config:
        pod, ctr = daemon_parts(ds)
        c.check(ctr["resources"]["limits"]["memory"] == "144Gi" and
                ctr["resources"]["requests"]["memory"] == "144Gi",
                f"big tiers: memory {ctr['resources']}, not 144Gi (128 + 16)")
        c.check(config["host"]["capacity"] == "128GiB", f"big tiers: host {config['host']}")
        c.check(config["disk"].get("dirs") == ["/mnt/nvme0/kvtier"] and
                config["disk"]["capacity"] == "2TiB", f"big tiers: disk {config['disk']}")
        km.check_host_dir(c, pod, ctr, "/mnt/nvme0/kvtier", "disk directory")
        init = pod["initContainers"][0]["command"][-1]
        c.check("/mnt/nvme0/kvtier" in init, f"big tiers: the initContainer does not chown the "
                                             f"disk directory: {init}")
        c.check(config["gpu"] == {"capacity": "8GiB", "device": 1}, f"big tiers: gpu "
                                                                    f"{config['gpu']}")
        env = {e["name"]: e["value"] for e in ctr["env"]}
        c.check(env.get("NVIDIA_VISIBLE_DEVICES") == "0,1",
                f"big tiers: NVIDIA_VISIBLE_DEVICES {env.get('NVIDIA_VISIBLE_DEVICES')}")
        c.check(pod.get("runtimeClassName") == "nvidia",
                f"big tiers: runtimeClassName {pod.get('runtimeClassName')}")
        c.check(ctr["resources"]["limits"]["cpu"] == "8", "big tiers: cpu is not 8")

    # Authentication and TLS (mutual), a ServiceMonitor label, extra configuration fields.
    files = make_secret_files(tmp)
    secure = ["auth.tokensSecret=kvtier-tokens", "tls.enabled=true", "tls.secretName=kvtier-tls",
              "tls.clientCASecret=kvtier-ca", "serviceMonitor.labels.release=prom",
              "config.extra.server.max_engines=2048", "config.logLevel=warning"]
    config, ds, objects = scenario(c, args, "auth and tls", files=files, sets=secure)
    if ds and config:
        pod, ctr = daemon_parts(ds)
        auth = config.get("auth") or {}
        c.check(auth.get("tokens_file") == "/etc/kvtier-auth/tokens" and
                secret_file_mounted(pod, ctr, auth["tokens_file"], "kvtier-tokens"),
                f"auth and tls: auth.tokens_file {auth.get('tokens_file')} is not in the Secret "
                f"kvtier-tokens' mount")
        tcp = config.get("tcp") or {}
        c.check(tcp.get("listen") == "0.0.0.0:50051", f"auth and tls: tcp.listen {tcp}")
        tls = tcp.get("tls") or {}
        for field, secret in (("cert_file", "kvtier-tls"), ("key_file", "kvtier-tls"),
                              ("client_ca_file", "kvtier-ca")):
            c.check(tls.get(field) and secret_file_mounted(pod, ctr, tls[field], secret),
                    f"auth and tls: tcp.tls.{field} {tls.get(field)} is not in the Secret "
                    f"{secret}'s mount")
        c.check(km.container_port(ctr, "grpc") == 50051, "auth and tls: no grpc container port")
        grpc = [o for o in objects if o["kind"] == "Service" and
                o["metadata"]["name"] == "kvtierd-grpc"]
        c.check(grpc and grpc[0]["spec"].get("internalTrafficPolicy") == "Local",
                "auth and tls: no kvtierd-grpc Service with internalTrafficPolicy Local")
        sm = [o for o in objects if o["kind"] == "ServiceMonitor"]
        c.check(sm and sm[0]["metadata"]["labels"].get("release") == "prom",
                "auth and tls: the ServiceMonitor lacks the label release=prom")
        c.check(config["server"].get("max_engines") == 2048 and config["server"]["workers"] == 8
                and config["log"]["level"] == "warning",
                f"auth and tls: config.extra not merged: server {config['server']}, "
                f"log {config['log']}")

    # Values kvtierd would refuse: helm refuses them, naming the value.
    for name, sets, want in (
            ("host tier above 90%", ["tiers.host.capacityGiB=64"], "tiers.host.memoryOverheadGiB"),
            ("tls without a certificate", ["tls.enabled=true"], "tls.secretName")):
        run = helm(args, "template", "kvtier", args.chart, *sum([["--set", s] for s in sets], []))
        c.check(run.returncode != 0 and want in run.stderr,
                f"{name}: helm template exited {run.returncode}, stderr {run.stderr.strip()!r} "
                f"does not name {want}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--helm", required=True)
    parser.add_argument("--chart", required=True)
    parser.add_argument("--manifests", required=True)
    parser.add_argument("--kvtierctl", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--kubectl")
    args = parser.parse_args()
    c = km.Checker()
    with open(os.path.join(args.chart, "Chart.yaml"), encoding="utf-8") as f:
        chart = yaml.safe_load(f)
    c.check(str(chart.get("appVersion")) == args.version,
            f"Chart.yaml: appVersion {chart.get('appVersion')} is not the project version "
            f"{args.version}")
    check_sync(c, args)
    with tempfile.TemporaryDirectory() as tmp:
        check_scenarios(c, args, tmp)
    for f in c.failures:
        print("FAIL:", f)
    print(f"{c.passed} checks passed, {len(c.failures)} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
