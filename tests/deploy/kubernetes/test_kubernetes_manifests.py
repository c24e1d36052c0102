#!/usr/bin/python3
"""Checks the Kubernetes manifests in deploy/kubernetes against each other and against kvtierd.

There is no Kubernetes API server and no JSON schema package here, so this checks by hand what a
broken manifest would get wrong: the required fields of each kind, the DaemonSet's selector and
pod template, probes on the metrics port that the ConfigMap's kvtierd.yaml listens on, memory
requests == limits and large enough for the configured host tier, no privileged mode or host
namespaces, hostPath volumes for the state, socket and pool directories, the Service and
ServiceMonitor selecting the pods and their port, and kustomization.yaml listing exactly the files
there are. The ConfigMap's kvtierd.yaml must pass `kvtierctl config validate` (kvtierd's own
loader; not `kvtierd --check-config`, which also checks this machine: its memory, ports and
directories, not the node's).

Every failed check is printed; the exit status is 1 when any failed.

usage: test_kubernetes_manifests.py --manifests DIR --kvtierctl PATH
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import yaml

GIB = 1 << 30
# Memory the daemon needs beyond the host tier at the least (README.md, "Memory"): the in-memory
# index, RocksDB's cache and memtables, gRPC, the CUDA context.
MIN_OVERHEAD_BYTES = 2 * GIB
# kvtierd refuses a host tier above this fraction of its cgroup memory limit (HostArenaOptions).
MAX_HOST_FRACTION = 0.9
# Seconds the pod needs after the drain grace: stopping the server, flushing the index, unpinning.
MIN_GRACE_MARGIN_SECONDS = 10
# Capabilities a container may add: the daemon none beyond IPC_LOCK (for an mlock-pinned tier);
# the init container what chown/chmod of the host directories need.
ALLOWED_CAPS = {"kvtierd": {"IPC_LOCK"}, "init": {"CHOWN", "FOWNER"}}


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


def config_size(text):
    """kvtierd's size syntax: bytes, or a number with KiB, MiB, GiB or TiB."""
    m = re.fullmatch(r"\s*(\d+)\s*(KiB|MiB|GiB|TiB)?\s*", str(text))
    if not m:
        return None
    unit = {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m.group(2)]
    return int(m.group(1)) * unit


def quantity(text):
    """A Kubernetes resource quantity (the binary and decimal suffixes) in bytes or units."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?", str(text))
    if not m:
        return None
    factors = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
               "Pi": 1 << 50, "Ei": 1 << 60, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
               "P": 10**15, "E": 10**18, "m": 1e-3}
    return float(m.group(1)) * factors[m.group(2)]


def name_of(d):
    return (d.get("metadata") or {}).get("name")


def subset(small, big):
    return bool(small) and all(big.get(k) == v for k, v in small.items())


def load_manifests(c, directory):
    docs = {}  # file name -> list of documents
    for name in sorted(os.listdir(directory)):
        if not name.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            try:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                c.check(False, f"{name}: not valid YAML: {e}")
                continue
        c.check(bool(loaded), f"{name}: holds no document")
        docs[name] = loaded
    return docs


def check_common(c, docs):
    objects = []
    for name, loaded in docs.items():
        for d in loaded:
            where = f"{name}: {d.get('kind', '?')}/{(d.get('metadata') or {}).get('name', '?')}"
            if not c.check(isinstance(d, dict), f"{name}: a document is not a mapping"):
                continue
            c.check(isinstance(d.get("apiVersion"), str) and d["apiVersion"],
                    f"{where}: no apiVersion")
            c.check(isinstance(d.get("kind"), str) and d["kind"], f"{where}: no kind")
            if d.get("kind") != "Kustomization":
                c.check(isinstance(d.get("metadata"), dict) and d["metadata"].get("name"),
                        f"{where}: no metadata.name")
            objects.append((name, d))
    return objects


def by_kind(objects, kind):
    return [d for _, d in objects if d.get("kind") == kind]


def one(c, objects, kind):
    found = by_kind(objects, kind)
    c.check(len(found) == 1, f"expected one {kind}, found {len(found)}")
    return found[0] if found else None


def check_kustomization(c, directory, docs, objects):
    k = one(c, objects, "Kustomization")
    if k is None:
        return
    c.check(k.get("apiVersion") == "kustomize.config.k8s.io/v1beta1",
            f"kustomization.yaml: apiVersion {k.get('apiVersion')}")
    listed = k.get("resources") or []
    for r in listed:
        c.check(os.path.isfile(os.path.join(directory, r)),
                f"kustomization.yaml lists {r}, which does not exist")
    for name in docs:
        if name != "kustomization.yaml":
            c.check(name in listed, f"kustomization.yaml does not list {name}")
    c.check(len(set(listed)) == len(listed), "kustomization.yaml lists a file twice")


def check_namespaces(c, objects):
    namespaces = [name_of(d) for d in by_kind(objects, "Namespace")]
    for _, d in objects:
        if d.get("kind") in ("Namespace", "Kustomization"):
            continue
        ns = (d.get("metadata") or {}).get("namespace")
        c.check(ns is not None, f"{d['kind']}/{name_of(d)}: no metadata.namespace")
        if namespaces and ns is not None:
            c.check(ns in namespaces,
                    f"{d['kind']}/{name_of(d)}: namespace {ns} is not {namespaces}")


def load_config(c, configmap, kvtierctl, files=None):
    """The ConfigMap's kvtierd.yaml, parsed, after `kvtierctl config validate` accepted it. `files`
    maps paths the pod mounts (Secrets the configuration names) to local files that stand in for
    them in the check."""
    data = configmap.get("data") or {}
    text = data.get("kvtierd.yaml")
    if not c.check(isinstance(text, str), "ConfigMap: no data key kvtierd.yaml"):
        return None, None
    checked = text
    for pod_path, local in (files or {}).items():
        checked = checked.replace(pod_path, local)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(checked)
        path = f.name
    try:
        run = subprocess.run([kvtierctl, "config", "validate", path],
                             capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(path)
    c.check(run.returncode == 0,
            f"kvtierctl config validate refuses the ConfigMap's kvtierd.yaml (exit "
            f"{run.returncode}): {run.stderr.strip() or run.stdout.strip()}")
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        c.check(False, f"ConfigMap kvtierd.yaml is not YAML: {e}")
        return None, None
    return config, text


def get(config, dotted, default=None):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def container_port(container, port):
    """The containerPort a probe's or Service's port (a number or a port name) refers to."""
    for p in container.get("ports") or []:
        if port == p.get("name") or port == p.get("containerPort"):
            return p.get("containerPort")
    return None


def mount_for(container, path):
    """The volumeMount whose mountPath holds `path` (the longest one)."""
    best = None
    for m in container.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    return best


def check_host_dir(c, pod, container, path, what):
    """`path` in the container lies on a hostPath volume at the same path on the node."""
    m = mount_for(container, path)
    if not c.check(m is not None, f"DaemonSet: no volumeMount holds the {what} {path}"):
        return
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    v = volumes.get(m.get("name"), {})
    host = v.get("hostPath")
    if not c.check(isinstance(host, dict),
                   f"DaemonSet: the {what} {path} is on volume {m.get('name')}, not a hostPath "
                   f"(an emptyDir or the pod's /dev/shm is not shared with other pods)"):
        return
    c.check(host.get("path", "").rstrip("/") == m["mountPath"].rstrip("/"),
            f"DaemonSet: the {what} volume mounts node path {host.get('path')} at "
            f"{m['mountPath']}; engines mount the node path at the same place, so they must match")
    c.check(not m.get("readOnly", False), f"DaemonSet: the {what} {path} is mounted read-only")


def effective(pod, container, field):
    sc = container.get("securityContext") or {}
    if field in sc:
        return sc[field]
    return (pod.get("securityContext") or {}).get(field)


def check_security(c, pod, container, role):
    name = container.get("name")
    sc = container.get("securityContext") or {}
    c.check(sc.get("privileged") is not True, f"DaemonSet container {name}: privileged")
    c.check(sc.get("allowPrivilegeEscalation") is False,
            f"DaemonSet container {name}: allowPrivilegeEscalation is not false")
    caps = sc.get("capabilities") or {}
    c.check("ALL" in (caps.get("drop") or []),
            f"DaemonSet container {name}: capabilities.drop lacks ALL")
    extra = set(caps.get("add") or []) - ALLOWED_CAPS[role]
    c.check(not extra, f"DaemonSet container {name}: adds capabilities {sorted(extra)}")
    if role == "kvtierd":
        c.check(effective(pod, container, "runAsNonRoot") is True,
                f"DaemonSet container {name}: runAsNonRoot is not true")
        uid = effective(pod, container, "runAsUser")
        c.check(uid is None or uid != 0, f"DaemonSet container {name}: runAsUser 0")


def check_daemonset(c, ds, config, configmap):
    meta = ds.get("metadata") or {}
    c.check(ds.get("apiVersion") == "apps/v1", f"DaemonSet: apiVersion {ds.get('apiVersion')}")
    spec = ds.get("spec") or {}
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    c.check(subset(selector, labels),
            f"DaemonSet {meta.get('name')}: selector {selector} does not match the pod "
            f"template's labels {labels}")
    pod = template.get("spec") or {}
    containers = pod.get("containers") or []
    inits = pod.get("initContainers") or []
    if not c.check(containers, "DaemonSet: no containers"):
        return labels, None
    for ctr in containers + inits:
        c.check(isinstance(ctr.get("image"), str) and ctr["image"],
                f"DaemonSet container {ctr.get('name')}: no image")
        c.check(ctr.get("name"), "DaemonSet: a container without a name")
        res = ctr.get("resources") or {}
        mem_req = (res.get("requests") or {}).get("memory")
        mem_lim = (res.get("limits") or {}).get("memory")
        c.check(mem_lim is not None and quantity(mem_req) == quantity(mem_lim),
                f"DaemonSet container {ctr.get('name')}: memory requests ({mem_req}) != "
                f"limits ({mem_lim})")
    for flag in ("hostIPC", "hostPID", "hostNetwork"):
        c.check(pod.get(flag) is not True, f"DaemonSet: {flag} is true")

    # GPU nodes only.
    node_selector = pod.get("nodeSelector") or {}
    affinity_text = yaml.safe_dump(pod.get("affinity") or {})
    c.check("nvidia.com/gpu.present" in node_selector or "nvidia.com/gpu" in affinity_text,
            "DaemonSet: neither nodeSelector nor affinity restricts it to GPU nodes")
    c.check(any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations") or []),
            "DaemonSet: no toleration for the nvidia.com/gpu taint")

    # Volumes referenced by mounts exist.
    volume_names = {v.get("name") for v in pod.get("volumes") or []}
    for ctr in containers + inits:
        for m in ctr.get("volumeMounts") or []:
            c.check(m.get("name") in volume_names,
                    f"DaemonSet container {ctr.get('name')}: mounts volume {m.get('name')}, "
                    f"which the pod does not declare")

    daemon = next((x for x in containers if x.get("name") == "kvtierd"), containers[0])
    check_security(c, pod, daemon, "kvtierd")
    for ctr in inits:
        check_security(c, pod, ctr, "init")
    if config is None:
        return labels, daemon

    # The configuration file is the ConfigMap's key, mounted where the command reads it.
    argv = [str(a) for a in (daemon.get("command") or []) + (daemon.get("args") or [])]
    config_args = [a[len("--config="):] for a in argv if a.startswith("--config=")]
    if c.check(len(config_args) == 1, f"DaemonSet: kvtierd's command {argv} has no --config="):
        m = mount_for(daemon, config_args[0])
        vols = {v.get("name"): v for v in pod.get("volumes") or []}
        cm_volume = vols.get(m.get("name"), {}).get("configMap") if m else None
        c.check(cm_volume is not None and
                cm_volume.get("name") == name_of(configmap) and
                os.path.basename(config_args[0]) == "kvtierd.yaml",
                f"DaemonSet: --config={config_args[0]} is not the ConfigMap "
                f"{name_of(configmap)}'s kvtierd.yaml")

    # Probes on the metrics listener.
    listen = str(get(config, "metrics.listen", "127.0.0.1:9464"))
    metrics_port = int(listen.rsplit(":", 1)[1]) if ":" in listen else None
    host = listen.rsplit(":", 1)[0].strip("[]")
    c.check(host not in ("127.0.0.1", "localhost", "::1"),
            f"ConfigMap: metrics.listen {listen} is loopback; the kubelet probes the pod IP")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        http = ((daemon.get(probe) or {}).get("httpGet")) or {}
        c.check(http.get("path") == path,
                f"DaemonSet: {probe} path is {http.get('path')}, not {path}")
        port = container_port(daemon, http.get("port"))
        c.check(port is not None,
                f"DaemonSet: {probe} port {http.get('port')} is not a declared container port")
        c.check(port == metrics_port,
                f"DaemonSet: {probe} port {port} is not the metrics port {metrics_port} of "
                f"metrics.listen")
    if daemon.get("startupProbe"):
        http = daemon["startupProbe"].get("httpGet") or {}
        c.check(container_port(daemon, http.get("port")) == metrics_port,
                "DaemonSet: startupProbe is not on the metrics port")

    # Memory: the host tier plus the overhead, and within kvtierd's own 90% rule.
    res = daemon.get("resources") or {}
    mem_limit = quantity((res.get("limits") or {}).get("memory"))
    capacity = config_size(get(config, "host.capacity", "auto"))
    if c.check(capacity is not None,
               f"ConfigMap: host.capacity {get(config, 'host.capacity', 'auto')!r} is not an "
               f"explicit size; the memory limit can only be checked against one"):
        c.check(mem_limit is not None and mem_limit >= capacity + MIN_OVERHEAD_BYTES,
                f"DaemonSet: memory limit {mem_limit} bytes is below host.capacity {capacity} + "
                f"{MIN_OVERHEAD_BYTES} bytes of overhead")
        c.check(mem_limit is not None and capacity <= MAX_HOST_FRACTION * mem_limit,
                f"DaemonSet: host.capacity {capacity} is above {MAX_HOST_FRACTION:.0%} of the "
                f"memory limit {mem_limit}; kvtierd refuses to start")

    # Host directories: state, socket and every pool directory on hostPath volumes.
    check_host_dir(c, pod, daemon, str(get(config, "state_dir", "/var/lib/kvtier")),
                   "state directory")
    socket = str(get(config, "server.socket", "/run/kvtier/kvtier.sock"))
    check_host_dir(c, pod, daemon, os.path.dirname(socket), "socket directory")
    for d in get(config, "pools.allowed_dirs", ["/dev/shm"]) or []:
        check_host_dir(c, pod, daemon, str(d).rstrip("/"), "pool directory")

    # The drain fits in the grace period.
    grace = int(get(config, "server.shutdown_grace_seconds", 10))
    period = pod.get("terminationGracePeriodSeconds", 30)
    c.check(period >= grace + MIN_GRACE_MARGIN_SECONDS,
            f"DaemonSet: terminationGracePeriodSeconds {period} is not above "
            f"server.shutdown_grace_seconds {grace} + {MIN_GRACE_MARGIN_SECONDS}")
    return labels, daemon


def check_service(c, svc, pod_labels, daemon):
    spec = svc.get("spec") or {}
    selector = spec.get("selector") or {}
    c.check(subset(selector, pod_labels),
            f"Service {name_of(svc)}: selector {selector} does not select the "
            f"DaemonSet's pods {pod_labels}")
    ports = spec.get("ports") or []
    c.check(ports, f"Service {name_of(svc)}: no ports")
    for p in ports:
        c.check(p.get("name"), f"Service {name_of(svc)}: a port without a name")
        target = p.get("targetPort", p.get("port"))
        if daemon is not None:
            c.check(container_port(daemon, target) is not None,
                    f"Service port {p.get('name')}: targetPort {target} is not a container "
                    f"port of kvtierd")


def check_servicemonitor(c, sm, svc):
    c.check(sm.get("apiVersion") == "monitoring.coreos.com/v1",
            f"ServiceMonitor: apiVersion {sm.get('apiVersion')}")
    spec = sm.get("spec") or {}
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    svc_labels = (svc.get("metadata") or {}).get("labels") or {}
    c.check(subset(selector, svc_labels),
            f"ServiceMonitor: selector {selector} does not select the Service's labels "
            f"{svc_labels}")
    names = (spec.get("namespaceSelector") or {}).get("matchNames")
    if names is not None:
        c.check((svc.get("metadata") or {}).get("namespace") in names,
                f"ServiceMonitor: namespaceSelector {names} misses the Service's namespace")
    port_names = {p.get("name") for p in (svc.get("spec") or {}).get("ports") or []}
    endpoints = spec.get("endpoints") or []
    c.check(endpoints, "ServiceMonitor: no endpoints")
    for e in endpoints:
        c.check(e.get("port") in port_names,
                f"ServiceMonitor endpoint port {e.get('port')} is not a Service port name "
                f"{sorted(port_names)}")
        c.check(e.get("path", "/metrics") == "/metrics",
                f"ServiceMonitor endpoint path {e.get('path')} is not /metrics")


def check_objects(c, objects, kvtierctl, files=None, servicemonitor=True):
    """Every check of the objects of one deployment (also used by tests/deploy/helm on the chart's
    renders); returns the ConfigMap's parsed kvtierd.yaml and the DaemonSet."""
    check_namespaces(c, objects)
    configmap = one(c, objects, "ConfigMap")
    config = None
    if configmap is not None:
        config, _ = load_config(c, configmap, kvtierctl, files)
    ds = one(c, objects, "DaemonSet")
    pod_labels, daemon = ({}, None)
    if ds is not None:
        pod_labels, daemon = check_daemonset(c, ds, config, configmap)
    services = by_kind(objects, "Service")
    for svc in services:
        check_service(c, svc, pod_labels, daemon)
    # The metrics Service: the one with the port named metrics, which the ServiceMonitor scrapes.
    metrics = [s for s in services
               if any(p.get("name") == "metrics" for p in (s.get("spec") or {}).get("ports") or [])]
    c.check(len(metrics) == 1, f"expected one Service with a port named metrics, found "
                               f"{len(metrics)}")
    monitors = by_kind(objects, "ServiceMonitor")
    if servicemonitor:
        sm = one(c, objects, "ServiceMonitor")
        if sm is not None and metrics:
            check_servicemonitor(c, sm, metrics[0])
    else:
        c.check(not monitors, f"expected no ServiceMonitor, found {len(monitors)}")
    return config, ds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--manifests", required=True)
    parser.add_argument("--kvtierctl", required=True)
    args = parser.parse_args()
    c = Checker()
    docs = load_manifests(c, args.manifests)
    objects = check_common(c, docs)
    check_kustomization(c, args.manifests, docs, objects)
    check_objects(c, objects, args.kvtierctl)
    for f in c.failures:
        print("FAIL:", f)
    print(f"{c.passed} checks passed, {len(c.failures)} failed "
          f"({len(objects)} objects in {len(docs)} files)")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
