#!/usr/bin/env bash
# Tools for bench/gateway_bench.py (idempotent): wrk from Debian, configurable-http-proxy
# (JupyterHub's proxy) from npm into bench/.node/, and uvloop/hiredis in the venv come with
# the project's own dependencies.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
need_apt=()
command -v wrk >/dev/null || need_apt+=(wrk)
command -v npm >/dev/null || need_apt+=(npm)
command -v redis-server >/dev/null || need_apt+=(redis-server)
if [ ${#need_apt[@]} -gt 0 ]; then
    $sudo_cmd apt-get update -qq
    $sudo_cmd apt-get install -y -qq "${need_apt[@]}"
fi
chp="$here/.node/node_modules/.bin/configurable-http-proxy"
if [ ! -x "$chp" ]; then
    npm install --silent --no-audit --no-fund --prefix "$here/.node" configurable-http-proxy@5
fi
"$chp" --version >/dev/null
echo "bench tools ready: $(command -v wrk), $chp"
