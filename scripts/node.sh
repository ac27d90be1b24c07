#!/usr/bin/env bash
# A real single-node Kubernetes 1.20 in its own network namespace, for `make test-cluster`.
#
#   scripts/node.sh up IMAGES_ENV   (IMAGES_ENV: what scripts/node-images.sh printed)
#                           etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#                           containerd, kubelet and kube-proxy; images imported; node Ready
#   scripts/node.sh down    stops all of it and puts the machine back as it was (idempotent)
#   scripts/node.sh snapshot   prints the kernel settings and hard-coded paths `down` restores
#   scripts/node.sh check [SNAPSHOT]   exits 1, saying what, if anything of a node is left on the
#                           machine (and which kernel setting or path differs from SNAPSHOT)
#   scripts/node.sh env     prints the variables the cluster suite reads (after up)
#
# Root only. Everything networked lives in the namespace $NS: an interface there carries the node's
# address (a veth pair that never leaves it), the Pods' bridge, Services (kube-proxy's iptables rules) and every port, so nothing
# reaches or changes the host's network, and control planes of other tests on loopback never
# meet this one. Commands run there with `nsenter --net=` (`ip netns exec` would remount /sys
# and hide the cgroup hierarchies from the kubelet).
#
# What cannot be namespaced, and how it is put back by `down` (also after a failure):
#   - kernel settings the kubelet sets globally (vm.overcommit_memory, kernel.panic,
#     kernel.panic_on_oops, vm.panic_on_oom, kernel.keys.root_max*): recorded first, restored;
#   - cgroups: one tree, /$NS, in every v1 hierarchy; removed;
#   - mounts: the kubelet's volume mounts under $STATE and the CRI's /run/netns/cni-*; unmounted;
#   - paths the kubelet, containerd and CNI hard-code (/var/lib/kubelet, /var/log/pods, ...):
#     removed when they did not exist before `up` (so one node per machine at a time).
# Processes are only ever stopped by the PIDs recorded here (and containers by our containerd).
set -euo pipefail

NS=${USERLAND_NODE_NS:-userland-node}
STATE=${USERLAND_NODE_STATE:-/var/lib/userland-node}
K8S_BIN=${USERLAND_K8S_CACHE:-$HOME/.cache/userland/k8s-1.20.2-p1}/bin
NODE_CACHE=${USERLAND_NODE_CACHE:-$HOME/.cache/userland/node}
NODE_NAME=$NS
NODE_IP=10.250.0.2
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.97.0.0/24
ADMIN_TOKEN_FILE=$STATE/pki/admin-token
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
         kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
HARDCODED=(/var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /run/containerd
           /etc/cni /opt/cni)
IN_NS=(nsenter "--net=/run/netns/$NS")

say() { echo "node: $*" >&2; }
die() { echo "node: error: $*" >&2; exit 1; }

require_root() {
    [[ $(id -u) -eq 0 ]] || die "a real node needs root (network namespaces, cgroups, mounts, containerd): run as root"
}

ctr_() { ctr --address "$STATE/run/containerd.sock" --namespace k8s.io "$@"; }

# ---- up --------------------------------------------------------------------------------------

start() {  # NAME CMD...: in the namespace, logs in $STATE/logs, pid in $STATE/pids
    local name=$1; shift
    "${IN_NS[@]}" "$@" > "$STATE/logs/$name.log" 2>&1 < /dev/null &
    echo $! > "$STATE/pids/$name"
}

wait_for() {  # SECONDS WHAT CMD...
    local seconds=$1 what=$2; shift 2
    local i
    for ((i = 0; i < seconds * 2; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    die "$what not ready after ${seconds}s (logs: $STATE/logs)"
}

write_kubeconfig() {  # USER TOKEN
    cat > "$STATE/kubeconfig-$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: node, cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$STATE/pki/apiserver.crt"}}]
users: [{name: $1, user: {token: "$2"}}]
contexts: [{name: node, context: {cluster: node, user: $1, namespace: default}}]
current-context: node
EOF
}

host_setup() {
    mkdir -p "$STATE"/{pids,logs,pki,etcd,run,cni/net.d,cni/ipam,containerd,kubelet,volumes}
    # What the machine looked like, for `down`.
    [[ -f $STATE/before ]] || { cmd_snapshot > "$STATE/before.partial" && mv "$STATE/before.partial" "$STATE/before"; }
    ip netns add "$NS"
    "${IN_NS[@]}" ip link set lo up
    # The node's address sits on one end of a veth pair whose both ends stay in the namespace
    # (no dummy interfaces in every kernel); nothing connects it to the host.
    "${IN_NS[@]}" ip link add node0 type veth peer name node0-peer
    "${IN_NS[@]}" ip link set node0-peer up
    "${IN_NS[@]}" ip addr add "$NODE_IP/24" dev node0
    "${IN_NS[@]}" ip link set node0 up
    # Service addresses must be routable before kube-proxy's DNAT sees them.
    "${IN_NS[@]}" ip route add default dev node0
    # Per network namespace: forwarding between Pods, and bridged traffic through iptables (a
    # Pod reaching a Service whose Pod sits on the same bridge).
    "${IN_NS[@]}" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
    local h
    for h in /sys/fs/cgroup/*/; do
        [[ -e ${h}cgroup.procs ]] || continue
        [[ $h == */unified/ ]] && continue
        mkdir -p "$h$NS"
    done
    cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$NS/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$NS/cpuset.mems"
}

start_containerd() {
    cat > "$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$STATE/run/containerd.sock"
[ttrpc]
  address = "$STATE/run/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:3.2"
  enable_selinux = false
  # root here lacks CAP_SYS_RESOURCE: the pause container's oom_score_adj of -998 would fail.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
        Root = "$STATE/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
    # The bridge plugin does not enforce NetworkPolicies (tests/cluster says so where it matters).
    cat > "$STATE/cni/net.d/10-userland.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "userland", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
    start containerd containerd --config "$STATE/containerd/config.toml"
    wait_for 30 containerd ctr --address "$STATE/run/containerd.sock" version
}

import_images() {
    local images tar
    images=$(awk -F= '$1 == "images" { print $2 }' "$STATE/images.env")
    [[ -d $images ]] || die "no image folder in $STATE/images.env"
    for tar in "$images"/*.tar; do
        ctr_ images import "$tar" >/dev/null
    done
}

start_control_plane() {
    [[ -f $STATE/pki/sa.key ]] || {
        openssl genrsa -out "$STATE/pki/sa.key" 2048 2>/dev/null
        openssl rsa -in "$STATE/pki/sa.key" -pubout -out "$STATE/pki/sa.pub" 2>/dev/null
    }
    local user token
    : > "$STATE/pki/tokens.csv"
    for user in admin kube-controller-manager kube-scheduler kube-proxy kubelet; do
        token=$(openssl rand -hex 16)
        case $user in
            admin) echo "$token,admin,admin,system:masters" >> "$STATE/pki/tokens.csv"
                   echo "$token" > "$ADMIN_TOKEN_FILE" ;;
            kubelet) echo "$token,system:node:$NODE_NAME,kubelet,system:nodes" >> "$STATE/pki/tokens.csv" ;;
            *) echo "$token,system:$user,$user" >> "$STATE/pki/tokens.csv" ;;
        esac
        write_kubeconfig "$user" "$token"
    done
    start etcd etcd --name node --data-dir "$STATE/etcd" --unsafe-no-fsync \
        --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster node=http://127.0.0.1:2380
    start kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
        --advertise-address=$NODE_IP --bind-address=$NODE_IP --secure-port=6443 --insecure-port=0 \
        --cert-dir="$STATE/pki" --token-auth-file="$STATE/pki/tokens.csv" \
        --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
        --allow-privileged=true --service-cluster-ip-range=$SERVICE_CIDR \
        --service-account-issuer=https://kubernetes.default.svc \
        --service-account-key-file="$STATE/pki/sa.pub" \
        --service-account-signing-key-file="$STATE/pki/sa.key" \
        --kubelet-preferred-address-types=InternalIP
    wait_for 90 kube-apiserver "${IN_NS[@]}" kubectl --kubeconfig "$STATE/kubeconfig-admin" get --raw /readyz
    # With RBAC, each controller needs its own ServiceAccount's rights (ReplicaSets otherwise
    # are never created); every controller runs (ServiceAccount tokens, endpoints, PV binding).
    start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
        --kubeconfig="$STATE/kubeconfig-kube-controller-manager" --bind-address=127.0.0.1 \
        --secure-port=0 --port=0 --leader-elect=false --controllers='*' \
        --use-service-account-credentials=true \
        --service-account-private-key-file="$STATE/pki/sa.key" --root-ca-file="$STATE/pki/apiserver.crt" \
        --cluster-cidr=10.244.0.0/16 --allocate-node-cidrs=false
    start kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig="$STATE/kubeconfig-kube-scheduler" \
        --leader-elect=false --port=0 --secure-port=0
}

start_node() {
    cat > "$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
cgroupRoot: /$NS
failSwapOn: false
# No cluster DNS on this node: Pods get the host's resolv.conf (the gateway needs no DNS).
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
# Images cannot be pulled again here: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
    start kubelet "$K8S_BIN/kubelet" --config="$STATE/kubelet.yaml" \
        --kubeconfig="$STATE/kubeconfig-kubelet" --root-dir="$STATE/kubelet" \
        --container-runtime=remote --container-runtime-endpoint="unix://$STATE/run/containerd.sock" \
        --runtime-request-timeout=5m --hostname-override=$NODE_NAME --node-ip=$NODE_IP \
        --cert-dir="$STATE/kubelet/pki" --volume-plugin-dir="$STATE/kubelet/plugins" \
        --pod-infra-container-image=localhost/pause:3.2
    cat > "$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$STATE/kubeconfig-kube-proxy"}
mode: iptables
clusterCIDR: 10.244.0.0/16
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the (global) conntrack table sizes alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
    start kube-proxy "$K8S_BIN/kube-proxy" --config="$STATE/kube-proxy.yaml"
    wait_for 120 "the node" "${IN_NS[@]}" kubectl --kubeconfig "$STATE/kubeconfig-admin" wait --for=condition=Ready \
        "node/$NODE_NAME" --timeout=1s
}

cmd_up() {
    require_root
    local t0=$SECONDS
    if [[ -e /run/netns/$NS ]] || compgen -G "$STATE/pids/*" >/dev/null; then
        die "a node is already up (or was not taken down): scripts/node.sh down"
    fi
    local bin
    for bin in kube-apiserver kube-controller-manager kubelet kube-proxy kube-scheduler; do
        [[ -x $K8S_BIN/$bin ]] || die "$K8S_BIN/$bin is missing: scripts/build-control-plane.sh $(dirname "$K8S_BIN") kubelet kube-proxy kube-scheduler"
    done
    for bin in containerd runc etcd ctr iptables conntrack; do
        command -v "$bin" >/dev/null || die "$bin is not installed (scripts/install-deps.sh node)"
    done
    local images_env=${1:-}
    [[ -f $images_env ]] || die "usage: scripts/node.sh up IMAGES_ENV (the output of scripts/node-images.sh)"
    host_setup
    cp "$images_env" "$STATE/images.env"
    start_containerd
    import_images
    start_control_plane
    start_node
    cmd_env > "$STATE/env"
    say "up in $((SECONDS - t0))s: kubectl --kubeconfig $STATE/kubeconfig-admin get nodes"
}

cmd_env() {
    echo "USERLAND_NODE_NS=$NS"
    echo "USERLAND_NODE_STATE=$STATE"
    echo "USERLAND_NODE_IP=$NODE_IP"
    echo "USERLAND_NODE_NAME=$NODE_NAME"
    echo "USERLAND_NODE_SERVICE_CIDR=$SERVICE_CIDR"
    echo "USERLAND_NODE_KUBECONFIG=$STATE/kubeconfig-admin"
    sed -e 's/^/USERLAND_NODE_IMAGE_/' "$STATE/images.env" | grep -v '^USERLAND_NODE_IMAGE_images='
}

# ---- down ------------------------------------------------------------------------------------

stop_pid() {  # NAME: SIGTERM, then SIGKILL after 10 s; only the PID we recorded
    local file=$STATE/pids/$1 pid i
    [[ -f $file ]] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

stop_containers() {
    # Every container of OUR containerd: its tasks, then the shims and inits it left (their
    # PIDs are in OUR state folder only).
    if [[ -S $STATE/run/containerd.sock ]]; then
        local task
        for task in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true; done
        sleep 1
        for task in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$task" >/dev/null 2>&1 || true; done
    fi
    local f pid shim
    for f in "$STATE"/containerd/state/io.containerd.runtime.v2.task/*/*/init.pid; do
        [[ -f $f ]] || continue
        pid=$(cat "$f")
        shim=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ' || true)
        kill -9 "$pid" 2>/dev/null || true
        [[ -n $shim && $shim != 1 ]] && kill -9 "$shim" 2>/dev/null || true
    done
    for f in "$STATE"/containerd/state/io.containerd.runtime.v2.task/*/*/shim.pid; do
        [[ -f $f ]] && kill -9 "$(cat "$f")" 2>/dev/null || true
    done
    # A shim no task file names any more (seen once: a Pod started while the suite ended) still
    # names OUR containerd's socket on its command line: ours alone, as `check` finds them.
    local left
    left=$(pgrep -f -- "-address $STATE/run/containerd.sock" || true)
    # shellcheck disable=SC2086
    [[ -n $left ]] && kill -9 $left 2>/dev/null || true
}

our_mounts() {
    awk '{ print $5 }' /proc/self/mountinfo | grep -E "^($STATE/|/run/netns/cni-)" | sort -r || true
}

cmd_down() {
    require_root
    [[ -d $STATE || -e /run/netns/$NS ]] || { say "nothing to take down"; return 0; }
    # Pods first, while the kubelet still runs, so they end the way Kubernetes ends them.
    if [[ -f $STATE/pids/kubelet && -f $STATE/pids/kube-apiserver ]]; then
        timeout 20 "${IN_NS[@]}" kubectl --kubeconfig "$STATE/kubeconfig-admin" delete deployments,replicasets,pods \
            --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
    fi
    local name
    for name in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
        stop_pid "$name"
    done
    stop_containers
    stop_pid containerd
    local m
    for m in $(our_mounts); do umount -l "$m" 2>/dev/null || true; done
    rm -f /run/netns/cni-*
    local h
    for h in /sys/fs/cgroup/*/; do
        [[ -d $h$NS ]] && find "$h$NS" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    # The namespace takes its links, routes, bridge and every iptables rule with it.
    [[ -e /run/netns/$NS ]] && ip netns del "$NS"
    if [[ -d /run/netns ]] && [[ -z $(ls -A /run/netns) ]]; then
        umount /run/netns 2>/dev/null || true
        rmdir /run/netns 2>/dev/null || true
    fi
    if [[ -f $STATE/before ]]; then
        local kind value
        while read -r kind value; do
            [[ $kind == sysctl ]] && sysctl -qw "$value"
        done < "$STATE/before"
        local p
        for p in "${HARDCODED[@]}"; do
            if [[ -e $p ]] && ! grep -qxF "path $p" "$STATE/before"; then rm -rf "$p"; fi
        done
    fi
    rm -rf "$STATE"
    say "down"
}

# ---- snapshot and check -------------------------------------------------------------------

cmd_snapshot() {  # what `down` restores and `check` compares: kernel settings, hard-coded paths
    local s p
    for s in "${SYSCTLS[@]}"; do echo "sysctl $s=$(sysctl -n "$s")"; done
    for p in "${HARDCODED[@]}"; do [[ -e $p ]] && echo "path $p"; done
    return 0
}

# ---- -----------------------------------------------------------------------------------

cmd_check() {
    local problems=() s want now p h
    [[ -e /run/netns/$NS ]] && problems+=("network namespace $NS")
    ls /run/netns/cni-* >/dev/null 2>&1 && problems+=("CRI network namespaces /run/netns/cni-*")
    [[ -d $STATE ]] && problems+=("state folder $STATE")
    [[ -n $(our_mounts) ]] && problems+=("mounts: $(our_mounts | tr '\n' ' ')")
    for h in /sys/fs/cgroup/*/; do [[ -d $h$NS ]] && problems+=("cgroup $h$NS"); done
    # Processes of a node: anything running our binaries or using our state folder.
    local pids
    pids=$(pgrep -f -- "$STATE/|$K8S_BIN/(kubelet|kube-proxy|kube-scheduler)" || true)
    [[ -n $pids ]] && problems+=("processes: $pids")
    ip link show cni0 >/dev/null 2>&1 && problems+=("a cni0 link on the host")
    ip link show node0 >/dev/null 2>&1 && problems+=("a node0 link on the host")
    iptables-save 2>/dev/null | grep -qE 'KUBE-|CNI-' && problems+=("Kubernetes or CNI iptables rules on the host")
    # Compared with a snapshot taken before `up`, when given one.
    local before=${1:-}
    if [[ -n $before ]]; then
        [[ -f $before ]] || die "no snapshot $before"
        local kind value
        while read -r kind value; do
            if [[ $kind == sysctl ]]; then
                s=${value%%=*} want=${value#*=}
                now=$(sysctl -n "$s")
                [[ $now == "$want" ]] || problems+=("kernel setting $s is $now, was $want")
            fi
        done < "$before"
        for p in "${HARDCODED[@]}"; do
            [[ -e $p ]] && ! grep -qxF "path $p" "$before" && problems+=("$p")
        done
    fi
    if ((${#problems[@]})); then
        printf 'node: left behind: %s\n' "${problems[@]}" >&2
        return 1
    fi
    say "nothing left behind"
}

case ${1:-} in
    up) cmd_up "${2:-}" ;;
    down) cmd_down ;;
    snapshot) cmd_snapshot ;;
    check) cmd_check "${2:-}" ;;
    env) cmd_env ;;
    *) echo "usage: scripts/node.sh up IMAGES_ENV | down | snapshot | check [SNAPSHOT] | env" >&2; exit 2 ;;
esac
