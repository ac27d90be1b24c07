#!/usr/bin/env bash
# Builds a real kube-apiserver and kube-controller-manager (Kubernetes 1.20.2) from
# Debian bookworm's source package, once, into a cache outside the repo.
#
# Usage: scripts/build-control-plane.sh [CACHE_DIR]   (default ~/.cache/userland/k8s-1.20.2)
# Prints the folder holding the binaries. A second run with the binaries present does nothing.
set -euo pipefail

cache=${1:-${USERLAND_K8S_CACHE:-$HOME/.cache/userland/k8s-1.20.2}}
bin="$cache/bin"
if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" ]]; then
    echo "$bin"
    exit 0
fi

work="$cache/build"
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/home" "$bin"

# A private deb-src list, so the machine's /etc/apt is left untouched.
cat > "$work/apt/sources.list" <<LIST
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
LIST
apt_private=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")

echo "building kube-apiserver + kube-controller-manager 1.20.2 (about 7 minutes, once)" >&2
apt-get "${apt_private[@]}" update -qq
(cd "$work" && rm -rf kubernetes-1.20* && apt-get "${apt_private[@]}" source --download-only kubernetes >/dev/null)
(cd "$work" && tar xzf kubernetes_*.orig.tar.gz)
src=$(ls -d "$work"/kubernetes-1.20*/ | head -n1)
cd "$src"
# Kubernetes 1.20 vendors reflect2 1.0.1, which faults under Go >= 1.18 on the first
# custom-object request; Debian's 1.0.2 is source compatible and fixes it.
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod
mkdir -p .go/src/k8s.io && ln -sfn ../../.. .go/src/k8s.io/kubernetes
env -u GOFLAGS GOPATH="$src/.go" HOME="$work/home" CGO_ENABLED=0 GOPROXY=off \
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >&2
cp _output/bin/kube-apiserver _output/bin/kube-controller-manager "$bin/"
# The source tree is 2.4 GB; only the two binaries are worth keeping.
cd / && rm -rf "$src" "$work/home"
"$bin/kube-apiserver" --version >&2
echo "$bin"
