#!/usr/bin/env bash
# sluice's benchmark: every scenario back to back in one run, each at several
# concurrencies, against the do-nothing handler measured in the same run.
# Writes results.jsonl (one cmd/loadgen result per line), results.md (the
# tables) and results.svg (throughput and p99 against concurrency) to the
# output directory, and prints results.md.
#
# How the two cores are shared, the same for every row: everything on the
# serving side (the do-nothing handler; or redis-server, the server and the
# sidecar) is pinned to core 0 with taskset, the load generator to core 1.
# GOGC and GOMAXPROCS are left to the environment, the same for every
# process. Each point: 1 s of warm-up, then the measured phase; 4 gRPC
# connections (fewer callers: one each).
#
# Usage: bench/run.sh [-d 3s] [-c "1 4 16 64"] [-o bench/out] [-r REV]
#   -d  measured phase per point
#   -c  concurrencies
#   -o  output directory
#   -r  also build git revision REV and measure its server and sidecar in
#       the same run (before and after a change)
set -euo pipefail
cd "$(dirname "$0")/.."
dur=3s
concs="1 4 16 64"
outdir=bench/out
compare=""
while getopts "d:c:o:r:" opt; do
  case $opt in
    d) dur=$OPTARG ;;
    c) concs=$OPTARG ;;
    o) outdir=$OPTARG ;;
    r) compare=$OPTARG ;;
    *) exit 2 ;;
  esac
done
for tool in redis-server taskset curl; do
  command -v $tool >/dev/null || { echo "bench/run.sh needs $tool (scripts/install-test-deps.sh installs redis-server)" >&2; exit 1; }
done

bin=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "$compare" ] && git worktree remove --force "$bin/compare-src" 2>/dev/null
  rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/" ./cmd/loadgen ./cmd/server ./cmd/localfilter ./bench/report
if [ -n "$compare" ]; then
  git worktree add -q --detach "$bin/compare-src" "$compare"
  mkdir -p "$bin/compare"
  (cd "$bin/compare-src" && go build -o "$bin/compare/" ./cmd/server ./cmd/localfilter)
fi
mkdir -p "$outdir"
results="$outdir/results.jsonl"
: > "$results"
cat > "$bin/limits.yaml" <<'YAML'
domain: bench
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 1000000000}
  - key: hot
    rate_limit: {name: hot, unit: second, requests_per_unit: 1000000000}
  - key: flood
    rate_limit: {name: flood, unit: hour, requests_per_unit: 1}
YAML

wait_port() {
  for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "nothing listens on :$1" >&2; exit 1
}
# serve NAME CMD...: start one serving process on core 0; its pid in $NAME.
serve() {
  local name=$1; shift
  taskset -c 0 "$@" >"$bin/$name.log" 2>&1 &
  printf -v "$name" '%s' $!
}
stop() { for p in "$@"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
# points LABEL PORT PIDS EXTRA-LOADGEN-FLAGS...: one result line per concurrency.
points() {
  local label=$1 port=$2 pids=$3; shift 3
  for c in $concs; do
    local conns=$(( c < 4 ? c : 4 ))
    local common=(-target "127.0.0.1:$port" -concurrency "$c" -conns "$conns" -domain bench "$@")
    taskset -c 1 "$bin/loadgen" "${common[@]}" -duration 1s >/dev/null
    taskset -c 1 "$bin/loadgen" "${common[@]}" -duration "$dur" -label "$label" -cpu-pids "$pids" -json >>"$results"
    echo "  $label, $c callers" >&2
  done
}

echo "scenarios at concurrencies $concs, $dur each:" >&2
serve noop "$bin/loadgen" -serve-noop 127.0.0.1:18081
wait_port 18081
points "do-nothing handler" 18081 "$noop" -descriptors 'client=c%d' -keys 10000
stop "$noop"

servers=("$bin")
[ -n "$compare" ] && servers+=("$bin/compare")
tag() { [ "$1" != "$bin" ] && echo " ($compare)"; true; }
for dir in "${servers[@]}"; do
  tag=$(tag "$dir")
  serve server "$dir/server" -config "$bin/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080
  wait_port 18081
  points "server, in-memory, 10k keys$tag" 18081 "$server" -descriptors "client=m${#tag}%d" -keys 10000
  stop "$server"
done

serve redis redis-server --port 16399 --bind 127.0.0.1 --save '' --appendonly no
wait_port 16399
redisflags=(-redis-addr 127.0.0.1:16399 -metrics-url http://127.0.0.1:18080/metrics)
for dir in "${servers[@]}"; do
  tag=$(tag "$dir")
  serve server "$dir/server" -config "$bin/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080 \
    -redis-url redis://127.0.0.1:16399 -store-timeout 100ms
  wait_port 18081
  points "server + Redis, 10k keys$tag" 18081 "$server,$redis" -descriptors "client=r${#tag}%d" -keys 10000 "${redisflags[@]}"
  points "server + Redis, one hot key$tag" 18081 "$server,$redis" -descriptors "hot=h${#tag}" -keys 1 "${redisflags[@]}"
  points "server + Redis, over-limit flood$tag" 18081 "$server,$redis" -descriptors "flood=f${#tag}" -keys 1 "${redisflags[@]}"
  for mode in async sync; do
    serve sidecar "$dir/localfilter" -config "$bin/limits.yaml" -upstream 127.0.0.1:18081 -grpc-addr 127.0.0.1:19081 \
      -http-addr 127.0.0.1:19080 -mode "$mode" -upstream-timeout 100ms
    wait_port 19081
    points "sidecar $mode, 10k keys uniform$tag" 19081 "$sidecar,$server,$redis" -descriptors "client=u$mode${#tag}%d" -keys 10000 "${redisflags[@]}"
    points "sidecar $mode, 10k keys zipf$tag" 19081 "$sidecar,$server,$redis" -descriptors "client=z$mode${#tag}%d" -keys 10000 -dist zipf "${redisflags[@]}"
    stop "$sidecar"
  done
  stop "$server"
done
stop "$redis"

"$bin/report" -in "$results" -md "$outdir/results.md" -svg "$outdir/results.svg" -ceiling "do-nothing handler"
cat "$outdir/results.md"
echo >&2
echo "written: $results, $outdir/results.md, $outdir/results.svg" >&2
