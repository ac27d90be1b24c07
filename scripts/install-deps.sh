#!/usr/bin/env bash
# Installs the Debian packages the tests and the local setup need, only those missing.
set -euo pipefail
want=(etcd-server golang-go golang-github-modern-go-reflect2-dev rsync jq openssl curl redis-server
      dpkg-dev make chromium)
# kubectl: Debian's kubernetes-client matches the control plane built here (1.20).
command -v kubectl >/dev/null || want+=(kubernetes-client)
# A venv-capable Python >= 3.11 (Debian bookworm's python3 is 3.11).
python3 -m venv --help >/dev/null 2>&1 || want+=(python3-venv)
missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing Debian packages: ${missing[*]}" >&2
    SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
