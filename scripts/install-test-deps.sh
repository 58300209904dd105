#!/usr/bin/env bash
# Installs the tools the test suite needs when they are missing (Debian; run as root).
# The tests never skip for a missing tool: they fail and point here.
set -euo pipefail

need=()
command -v redis-server   >/dev/null || need+=(redis-server)
command -v redis-cli      >/dev/null || need+=(redis-tools)
command -v redis-sentinel >/dev/null || need+=(redis-sentinel)
command -v docker-compose >/dev/null || need+=(docker-compose)
# The admin page test drives a real headless browser (chromedp).
command -v chromium       >/dev/null || need+=(chromium)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Debian starts a system redis-server on :6379 after install; the tests use
# their own servers on random ports and do not need it.
if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi
