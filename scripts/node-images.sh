#!/usr/bin/env bash
# Builds the test node's container images without any registry, once, into a cache outside the
# repo, and prints the folder holding them as docker-archive tars (`ctr images import` takes them).
#
# Usage: scripts/node-images.sh [CACHE_DIR]     (default ~/.cache/userland/node; root only)
#
#   userland-base  a Debian bookworm root filesystem from debootstrap, from the mirror this
#                  machine's apt already uses (about 2.5 minutes, once)
#   pause          the Pod sandbox, compiled from the Kubernetes source tarball the control
#                  plane build keeps ($USERLAND_K8S_CACHE/build)
#   userland       the project's image: deploy/Dockerfile with --build-arg BASE=the base above;
#                  its tag is a hash of the sources it copies, so a change rebuilds it
#   userland-redis deploy/redis.yaml's Redis, from Debian's redis-server
#   userland-testenv  the small test environment (tests/cluster/envapp.py) on the project's image
#   userland-vscode, userland-jupyterlab, userland-mariadb  the shipped Templates' images
#                  (deploy/images/Dockerfile; USERLAND_NODE_APPS="" builds none of them)
#
# Prints "NAME=IMAGE" lines for the manifests to use (stdout); progress goes to stderr.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-${USERLAND_NODE_CACHE:-$HOME/.cache/userland/node}}
k8s_cache=${USERLAND_K8S_CACHE:-$HOME/.cache/userland/k8s-1.20.2-p1}
images="$cache/images"
store="$cache/buildah"
dockerfiles="$repo/tests/cluster/images"
mkdir -p "$images" "$store/root" "$store/runroot"
# vfs: no overlay mounts to leave behind; --network host: RUN steps reach PyPI and the Debian
# mirror (the only registries here) without a CNI network of buildah's own.
buildah=(buildah --root "$store/root" --runroot "$store/runroot" --storage-driver vfs)
bud=("${buildah[@]}" bud --pull-never --network host --layers=false --quiet)
# RUN steps trust what this machine trusts (a site's TLS-inspecting proxy's CA included), with
# pip told so too; the mounts are never part of an image.
ca_bundle=$(python3 -c 'import ssl; print(ssl.get_default_verify_paths().openssl_cafile)')
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$cache/pip.conf"
bud+=(-v "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro" -v "$cache/pip.conf:/etc/pip.conf:ro")

say() { echo "node-images: $*" >&2; }

# buildah makes /etc/cni/net.d for networks of its own (never used here: --network host); take
# it away again when it was not there before.
if [[ ! -e /etc/cni ]]; then
    trap 'rm -f /etc/cni/net.d/cni.lock; rmdir /etc/cni/net.d /etc/cni 2>/dev/null || true' EXIT
fi

# docker-archive tar of IMAGE at $images/FILE, unless it is there already.
export_image() {
    local image=$1 file=$2
    rm -f "$images/$file.partial"
    "${buildah[@]}" push --quiet "$image" "docker-archive:$images/$file.partial:$image" >/dev/null
    mv "$images/$file.partial" "$images/$file"
}

have_image() { "${buildah[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# ---- base: debootstrap from this machine's own Debian mirror --------------------------------
base_packages=python3,python3-venv,ca-certificates
base_tag=bookworm-$(printf '%s' "$base_packages" | sha256sum | cut -c1-8)
base=localhost/userland-base:$base_tag
if ! have_image "$base"; then
    mirror=$(apt-get indextargets --format '$(ORIGIN)|$(CODENAME)|$(TARGET_OF)|$(REPO_URI)|$(COMPONENT)' \
        | awk -F'|' '$1 == "Debian" && $2 == "bookworm" && $3 == "deb" && $5 == "main" { print $4; exit }')
    if [[ -z $mirror ]]; then
        echo "error: this machine's apt sources have no Debian bookworm 'main' entry for debootstrap" >&2
        exit 1
    fi
    say "building the Debian base with debootstrap (about 2.5 minutes, once)"
    work=$(mktemp -d "$cache/base.XXXXXX")
    debootstrap --variant=minbase --include="$base_packages" bookworm "$work/rootfs" "$mirror" \
        > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; rm -rf "$work"; exit 1; }
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
    cp "$dockerfiles/Dockerfile.base" "$work/Dockerfile"
    "${bud[@]}" -f "$work/Dockerfile" -t "$base" "$work" >/dev/null
    rm -rf "$work"
fi

# ---- pause ------------------------------------------------------------------------------------
pause=localhost/pause:3.2
if [[ ! -f $images/pause.tar ]]; then
    tarball=$(ls "$k8s_cache"/build/kubernetes_*.orig.tar.gz 2>/dev/null | head -n1 || true)
    if [[ -z $tarball ]]; then
        echo "error: no Kubernetes source tarball in $k8s_cache/build (run scripts/build-control-plane.sh first)" >&2
        exit 1
    fi
    say "compiling the pause image"
    work=$(mktemp -d "$cache/pause.XXXXXX")
    tar -xzf "$tarball" -C "$work" --wildcards --strip-components=1 '*/build/pause/linux/pause.c'
    gcc -Os -static -DVERSION=v3.2-userland -o "$work/pause" "$work/build/pause/linux/pause.c"
    strip "$work/pause"
    "${bud[@]}" -f "$dockerfiles/Dockerfile.pause" -t "$pause" "$work" >/dev/null
    export_image "$pause" pause.tar
    rm -rf "$work"
fi

# ---- the project's image ----------------------------------------------------------------------
# What deploy/Dockerfile copies, hashed: the tag changes exactly when the image would.
sources=(pyproject.toml README.md deploy/Dockerfile platform operator auth proxy web cli local coursework)
src_hash=$(cd "$repo" && find "${sources[@]}" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
userland=localhost/userland:$src_hash
if [[ ! -f $images/userland-$src_hash.tar ]]; then
    say "building the project's image from deploy/Dockerfile (BASE=$base)"
    rm -f "$images"/userland-????????????.tar
    "${bud[@]}" --build-arg "BASE=$base" -f "$repo/deploy/Dockerfile" -t "$userland" "$repo" >/dev/null
    export_image "$userland" "userland-$src_hash.tar"
fi

# ---- Redis -----------------------------------------------------------------------------------
redis=localhost/userland-redis:7
if [[ ! -f $images/userland-redis.tar ]]; then
    say "building Redis from Debian"
    "${bud[@]}" --build-arg "BASE=$base" -f "$dockerfiles/Dockerfile.redis" -t "$redis" "$dockerfiles" >/dev/null
    export_image "$redis" userland-redis.tar
fi

# ---- the test environment --------------------------------------------------------------------
env_hash=$( (echo "$src_hash"; cat "$repo/tests/cluster/envapp.py" "$dockerfiles/Dockerfile.testenv") \
    | sha256sum | cut -c1-12)
testenv=localhost/userland-testenv:$env_hash
if [[ ! -f $images/userland-testenv-$env_hash.tar ]]; then
    say "building the test environment image"
    rm -f "$images"/userland-testenv-*.tar
    work=$(mktemp -d "$cache/testenv.XXXXXX")
    cp "$repo/tests/cluster/envapp.py" "$work/"
    "${bud[@]}" --build-arg "USERLAND_IMAGE=$userland" -f "$dockerfiles/Dockerfile.testenv" \
        -t "$testenv" "$work" >/dev/null
    export_image "$testenv" "userland-testenv-$env_hash.tar"
    rm -rf "$work"
fi

# ---- the shipped Templates' apps --------------------------------------------------------------
# deploy/images/Dockerfile runs scripts/install-local-apps.sh (the recipe `make local-apps` runs),
# once per app. The tag stays the one the Templates name (localhost/userland-APP:1); the tar's
# name carries a hash of the recipe and the base, so a changed recipe builds afresh.
app_hash=$( (echo "$base"; cat "$repo/deploy/images/Dockerfile" "$repo/scripts/install-local-apps.sh" \
    "$repo"/scripts/local-apps/*) | sha256sum | cut -c1-12)
for app in ${USERLAND_NODE_APPS-vscode jupyterlab mariadb}; do
    image=localhost/userland-$app:1
    if [[ ! -f $images/app-$app-$app_hash.tar ]]; then
        say "building the $app image from deploy/images/Dockerfile (a few minutes, once)"
        rm -f "$images"/app-"$app"-*.tar
        "${bud[@]}" --build-arg "BASE=$base" --build-arg "APP=$app" -f "$repo/deploy/images/Dockerfile" \
            -t "$image" "$repo" >/dev/null
        export_image "$image" "app-$app-$app_hash.tar"
        "${buildah[@]}" rmi "$image" >/dev/null 2>&1 || true  # the tar is what is kept
    fi
    echo "app_$app=$image"
done

# Old builds of the project's image are not needed once exported (vfs keeps full copies).
"${buildah[@]}" images --format '{{.Name}}:{{.Tag}}' 2>/dev/null \
    | grep -E '^localhost/userland(-testenv)?:' | grep -vxF -e "$userland" -e "$testenv" \
    | xargs -r "${buildah[@]}" rmi >/dev/null 2>&1 || true

echo "images=$images"
echo "pause=$pause"
echo "userland=$userland"
echo "redis=$redis"
echo "testenv=$testenv"
