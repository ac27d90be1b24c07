#!/usr/bin/env bash
# Installs the Debian packages the tests and the local setup need, only those missing.
set -euo pipefail
# php-cli: the gateway is tested against PHP's built-in server (close-delimited bodies).
# git: the assignment store fetches sources with it; make run and the tests serve repositories
# with its http-backend.
want=(etcd-server golang-go golang-github-modern-go-reflect2-dev rsync jq openssl curl redis-server
      dpkg-dev make chromium php-cli git)
# Installed without recommends (no node exporter): promtool checks the alert rules, the tests and
# `make run PROMETHEUS=1` run their own prometheus. (On a machine with systemd, Debian also starts
# its own service on :9090; `systemctl disable --now prometheus` if you do not want it.)
lean=(prometheus)
# kubectl: Debian's kubernetes-client matches the control plane built here (1.20).
command -v kubectl >/dev/null || want+=(kubernetes-client)
# A venv-capable Python >= 3.11 (Debian bookworm's python3 is 3.11).
python3 -m venv --help >/dev/null 2>&1 || want+=(python3-venv)
# `install-deps.sh node`: what the real node of `make test-cluster` needs instead (container
# runtime, CNI plugins, iptables for kube-proxy, image building without a registry).
options=()
if [[ ${1:-} == node ]]; then
    options=(--no-install-recommends)
    # docker-registry: bench/capacity_bench.py (and the capacity real-node test, to come) serve
    # the Templates' images from a registry of their own inside the node (so a pull is a real
    # pull); its Debian service is not started here (below).
    want=(containerd runc containernetworking-plugins iptables conntrack buildah debootstrap etcd-server
          golang-go golang-github-modern-go-reflect2-dev rsync jq openssl gcc libc6-dev iproute2 procps
          docker-registry)
    lean=()
fi
absent() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}
mapfile -t missing < <(absent "${want[@]}")
mapfile -t missing_lean < <(absent "${lean[@]}")
SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
if ((${#missing[@]} + ${#missing_lean[@]})); then
    echo "installing Debian packages: ${missing[*]} ${missing_lean[*]}" >&2
    $SUDO apt-get update -qq
fi
if ((${#missing[@]})); then
    # Packages whose Debian service would start on install (docker-registry on :5000) are
    # installed without starting it: the tests run their own. policy-rc.d is Debian's way to say
    # so; one already there is left as it is.
    policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        policy=/usr/sbin/policy-rc.d
        trap '$SUDO rm -f "$policy"' EXIT
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod +x "$policy"
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${options[@]}" "${missing[@]}" >/dev/null
    [[ -z $policy ]] || $SUDO rm -f "$policy"
fi
if ((${#missing_lean[@]})); then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing_lean[@]}" \
        >/dev/null
fi
