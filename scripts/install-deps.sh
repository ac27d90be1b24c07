#!/usr/bin/env bash
# Installs the Debian packages the tests and the local setup need, only those missing.
set -euo pipefail
# php-cli: the gateway is tested against PHP's built-in server (close-delimited bodies).
# git: the assignment store fetches sources with it; make run and the tests serve repositories
# with its http-backend.
want=(etcd-server golang-go golang-github-modern-go-reflect2-dev rsync jq openssl curl redis-server
      dpkg-dev make chromium php-cli git)
# kubectl: Debian's kubernetes-client matches the control plane built here (1.20).
command -v kubectl >/dev/null || want+=(kubernetes-client)
# A venv-capable Python >= 3.11 (Debian bookworm's python3 is 3.11).
python3 -m venv --help >/dev/null 2>&1 || want+=(python3-venv)
# `install-deps.sh node`: what the real node of `make test-cluster` needs instead (container
# runtime, CNI plugins, iptables for kube-proxy, image building without a registry).
options=()
if [[ ${1:-} == node ]]; then
    options=(--no-install-recommends)
    want=(containerd runc containernetworking-plugins iptables conntrack buildah debootstrap etcd-server
          golang-go golang-github-modern-go-reflect2-dev rsync jq openssl gcc libc6-dev iproute2 procps)
fi
missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing Debian packages: ${missing[*]}" >&2
    SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${options[@]}" "${missing[@]}" >/dev/null
fi
