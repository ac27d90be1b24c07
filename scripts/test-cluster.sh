#!/usr/bin/env bash
# make test-cluster: the deployment proven on a real node.
#
# Builds what is missing (node binaries and images, cached outside the repo), brings a single
# real Kubernetes node up in its own network namespace (scripts/node.sh), runs tests/cluster/
# inside that namespace, and takes everything down again, whatever happened: a failed test,
# Ctrl-C or SIGTERM. Then it checks that nothing is left (processes, mounts, cgroups, network
# namespaces, links, iptables rules, kernel settings, hard-coded paths) and fails if anything is.
#
# Usage: scripts/test-cluster.sh [PYTEST ARGS...]      (root; run by `make test-cluster`)
#
# USERLAND_BENCH=capacity: bench/capacity_bench.py after the suite, against the platform it
# applied (both parts). USERLAND_BENCH=lecture: the suite is skipped but for its first test (the
# platform applied and available), then only the bench's scheduled start (--only lecture), on a
# node that holds nothing but the platform. Figures in bench/results/capacity.json.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "make test-cluster needs root: it runs a real Kubernetes node (network namespaces, cgroups," >&2
    echo "mounts, containerd). Run it as root, e.g. sudo make test-cluster. (make test needs no root.)" >&2
    exit 1
fi

export USERLAND_K8S_CACHE=${USERLAND_K8S_CACHE:-$HOME/.cache/userland/k8s-1.20.2-p1}
export USERLAND_NODE_CACHE=${USERLAND_NODE_CACHE:-$HOME/.cache/userland/node}
t0=$SECONDS
stamp() { echo "test-cluster: $* ($((SECONDS - t0))s)" >&2; }
# What runs on the node: the suite (PYTEST ARGS added), and the bench after it if asked.
selection=(--durations=0 tests/cluster "$@")
bench=()
case ${USERLAND_BENCH:-} in
    "") ;;
    capacity) bench=(bench/capacity_bench.py) ;;
    # Only the platform, as the suite's fixture applies it: the bench's lecture has the node to itself.
    lecture) selection=(tests/cluster/test_deploy_on_node.py::test_every_deployment_is_available)
             bench=(bench/capacity_bench.py --only lecture) ;;
    *) echo "test-cluster: USERLAND_BENCH is capacity or lecture, not '$USERLAND_BENCH'" >&2; exit 2 ;;
esac

bash scripts/install-deps.sh node
bash scripts/build-control-plane.sh "$USERLAND_K8S_CACHE" \
    kube-apiserver kube-controller-manager kubelet kube-proxy kube-scheduler >/dev/null
stamp "binaries ready"
run=$(mktemp -d /tmp/userland-test-cluster.XXXXXX)
scripts/node-images.sh "$USERLAND_NODE_CACHE" > "$run/images.env"
stamp "images ready"
# A node left by a run that could not clean up (killed with SIGKILL, a power cut): take it down
# first (it restores what its own `up` recorded), so a new run starts from the machine as it was.
if [[ -e /var/lib/userland-node || -e /run/netns/userland-node ]]; then
    stamp "a node of an earlier run is still here: taking it down first"
    scripts/node.sh down
fi
# Before anything changes: what `check` compares with at the end.
scripts/node.sh snapshot > "$run/before"

finish() {
    local rc=$?
    trap - EXIT INT TERM
    stamp "taking the node down"
    scripts/node.sh down || rc=1
    if ! scripts/node.sh check "$run/before"; then
        echo "test-cluster: FAILED: the node left something behind (above)" >&2
        rc=1
    fi
    rm -rf "$run"
    stamp "done"
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

node_up_start=$SECONDS
scripts/node.sh up "$run/images.env"
stamp "node Ready in $((SECONDS - node_up_start))s"
set -a
# shellcheck disable=SC1091
. /var/lib/userland-node/env
set +a
ns=$USERLAND_NODE_NS
# The suite runs in the node's network namespace: the API server, Services and Pods are there.
rc=0
nsenter --net="/run/netns/$ns" .venv/bin/python -m pytest -p no:cacheprovider -q -rA --timeout=1200 \
    "${selection[@]}" || rc=$?
if [[ ${#bench[@]} -gt 0 && ( $rc -eq 0 || ${USERLAND_BENCH} == capacity ) ]]; then
    stamp "${bench[*]}"
    nsenter --net="/run/netns/$ns" .venv/bin/python "${bench[@]}" \
        --kubeconfig "$USERLAND_NODE_KUBECONFIG" --image "$USERLAND_NODE_IMAGE_testenv" \
        --images-env "$USERLAND_NODE_STATE/images.env" || rc=1
    stamp "bench done"
fi
# The node's memory while the platform and students ran: its processes and its Pods' cgroups.
rss_kb=0
for pidfile in /var/lib/userland-node/pids/*; do
    pid=$(cat "$pidfile")
    kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
    rss_kb=$((rss_kb + kb))
done
pods_bytes=$(cat "/sys/fs/cgroup/memory/$ns/memory.usage_in_bytes" 2>/dev/null || echo 0)
echo "test-cluster: node memory: node processes ${rss_kb} KiB RSS (kubelet, containerd, control plane);" \
     "cgroup /$ns (Pods) $((pods_bytes / 1024)) KiB" >&2
exit "$rc"
