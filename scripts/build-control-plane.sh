#!/usr/bin/env bash
# Builds real Kubernetes 1.20.2 binaries from Debian bookworm's source package, once, into a
# cache outside the repo.
#
# Usage: scripts/build-control-plane.sh [CACHE_DIR] [WHAT...]
#   CACHE_DIR  default $USERLAND_K8S_CACHE, else ~/.cache/userland/k8s-1.20.2-p1
#   WHAT       binaries to build (default: kube-apiserver kube-controller-manager; the real-node
#              suite also asks for kubelet kube-proxy kube-scheduler)
# Prints the folder holding the binaries. A second run with the binaries present does nothing.
#
# The cache key ends in "-p1": the binaries carry our patches (below); a change to the patches
# must change the key so every existing cache is rebuilt.
set -euo pipefail

cache=${1:-${USERLAND_K8S_CACHE:-$HOME/.cache/userland/k8s-1.20.2-p1}}
shift || true
what=("$@")
[[ ${#what[@]} -gt 0 ]] || what=(kube-apiserver kube-controller-manager)
bin="$cache/bin"
find_missing() {
    missing=()
    for name in "${what[@]}"; do
        [[ -x "$bin/$name" ]] || missing+=("$name")
    done
}
find_missing
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "$bin"
    exit 0
fi
# One build at a time per cache: a second one (`make control-plane` beside a test's fixture, or
# the real-node suite's) would unpack the source over the first's and fail it half-way (as a new
# machine's setup most likely did). The second waits, then finds the binaries built.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
find_missing
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "$bin"
    exit 0
fi

work="$cache/build"
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/home" "$bin"

# A private deb-src list, so the machine's /etc/apt is left untouched. Its entries are the
# deb-src twins of this machine's own Debian bookworm entries as apt parsed them (any mirror,
# .list or .sources format), so no mirror's name is written here.
apt-get indextargets --format '$(ORIGIN)|$(CODENAME)|$(TARGET_OF)|$(REPO_URI)|$(RELEASE)|$(COMPONENT)' \
    | awk -F'|' '$1 == "Debian" && $2 ~ /^bookworm/ && $3 == "deb" && $6 == "main" {
        print "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] " $4 " " $5 " " $6 }' \
    | sort -u > "$work/apt/sources.list"
if [[ ! -s "$work/apt/sources.list" ]]; then
    echo "error: this machine's apt sources have no Debian bookworm 'main' entry to fetch the kubernetes source package from" >&2
    exit 1
fi
apt_private=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")

echo "building ${missing[*]} 1.20.2 from Debian's source (about 7 minutes for the control plane, 8 more for a node; once)" >&2
# The source tarball is kept (about 30 MB), so a later build of other binaries skips the download.
if ! ls "$work"/kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
    apt-get "${apt_private[@]}" update -qq
    (cd "$work" && apt-get "${apt_private[@]}" source --download-only kubernetes >/dev/null)
fi
(cd "$work" && rm -rf kubernetes-1.20*/ && tar xzf kubernetes_*.orig.tar.gz)
src=$(ls -d "$work"/kubernetes-1.20*/ | head -n1)
cd "$src"
# Kubernetes 1.20 vendors reflect2 1.0.1, which faults under Go >= 1.18 on the first
# custom-object request; Debian's 1.0.2 is source compatible and fixes it.
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod
# Under Go >= 1.16 kube-openapi's type check takes "" for null (reflect.Zero of a string equals
# ""), so a custom resource or CRD default with an empty string is refused ('must be of type
# string: "null"') where a real 1.20 accepts it. Upstream's one-line fix: kubernetes#99804,
# kube-openapi#230 (in Kubernetes >= 1.21).
typecheck=vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go
sed -i 's/if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {/if data == nil {/' "$typecheck"
grep -qx $'\tif data == nil {' "$typecheck" || { echo "error: the kube-openapi fix did not apply to $typecheck" >&2; exit 1; }
# goimports would flag the now unused import; the Go compiler would refuse it.
if ! grep -q 'reflect\.' "$typecheck"; then
    sed -i '/^\t"reflect"$/d' "$typecheck"
fi
mkdir -p .go/src/k8s.io && ln -sfn ../../.. .go/src/k8s.io/kubernetes
targets=()
for name in "${missing[@]}"; do targets+=("cmd/$name"); done
env -u GOFLAGS GOPATH="$src/.go" HOME="$work/home" CGO_ENABLED=0 GOPROXY=off \
    make WHAT="${targets[*]}" >&2
for name in "${missing[@]}"; do cp "_output/bin/$name" "$bin/"; done
# The source tree is 2.4 GB; only the binaries (and the tarball) are worth keeping.
cd / && rm -rf "$src" "$work/home"
"$bin/${missing[0]}" --version >&2
echo "$bin"
