#!/usr/bin/env bash
# sluice's benchmark: every scenario back to back, each at several
# concurrencies, in interleaved rounds, next to the do-nothing handler and,
# given its binary, envoyproxy/ratelimit (the reference) measured in the same
# rounds. Writes results.jsonl (one cmd/loadgen result per line), results.md
# (medians over the rounds, and each round) and results.svg (throughput and
# p99 against concurrency) to the output directory, and prints results.md.
#
# The hybrid rows (sidecar, cached) read the tier's own counters around
# each point: a point at which it decided anything without the central
# state (fallback, shed, failure mode, dropped hits, its upstream marked
# down, its records refused) is a failed run, like one with errors, and
# each reports its
# central cost: the server's and Redis's CPU per decided request.
#
# How the two cores are shared, the same for every row: everything on the
# serving side (the do-nothing handler; or redis-server, the server and the
# sidecar; or redis-server and the reference) is pinned to core 0 with
# taskset, the load generator to core 1. sluice's processes, the do-nothing
# handler and the load generator collect garbage at the daemons' defaults
# (-gc-percent 400, -memory-limit auto); the reference at its own (GOGC from
# the environment); GOMAXPROCS is left to the environment. Each point: a warm-up (-w), then
# the measured phase; 4 gRPC connections (fewer callers: one each). A round
# runs every scenario once; rounds alternate so that a noisy minute on a
# shared machine falls on every configuration alike.
#
# Usage: bench/run.sh [-d 3s] [-w 1s] [-c "1 4 16 64"] [-n 1] [-s SCENARIOS] [-o bench/out]
#                     [-r REV] [-R PATH]
#   -d  measured phase per point
#   -w  warm-up per point, on the same keys; default 1s, and 14s for the
#       hybrid rows, whose holds on loose keys reach their steady state once
#       the first have ended, after -loose-hold's 10 s (common.sh's warm_for)
#   -c  concurrencies
#   -n  rounds
#   -s  scenarios, space-separated (default: all that can run):
#       noop memory redis zipf hot flood cached sidecar ref ref-window
#       (zipf: 10k keys drawn with zipf s = 1.1, on Redis and, with -R, on
#       the reference; cached: the server's cached Redis mode, uniform and
#       zipf keys)
#   -o  output directory
#   -r  also build git revision REV and measure its server and sidecar in
#       the same rounds (before and after a change)
#   -R  an envoyproxy/ratelimit binary: measure it too (scenarios ref and
#       ref-window). Build it from that project's own source, outside this
#       repository, e.g.
#         git clone https://github.com/envoyproxy/ratelimit /tmp/ratelimit
#         (cd /tmp/ratelimit && go build -o /tmp/ratelimit-bin ./src/service_cmd/main.go)
#         bench/run.sh -R /tmp/ratelimit-bin
#       It runs with the same descriptor config (its YAML format is ours)
#       from a runtime directory this script writes, on the same Redis, with
#       the environment below (its defaults otherwise): REDIS_SOCKET_TYPE=tcp,
#       REDIS_URL, USE_STATSD=false, LOG_LEVEL=warn, its listeners on
#       loopback, and LOCAL_CACHE_SIZE_IN_BYTES=1048576 (its over-limit
#       cache, off by default, on here so that the flood rows compare
#       caches). ref-window adds REDIS_PIPELINE_WINDOW=150us, which its
#       README advises for throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dur=3s
concs="1 4 16 64"
rounds=1
scenarios=""
outdir=bench/out
compare=""
reference=""
warm=""
while getopts "d:w:c:n:s:o:r:R:" opt; do
  case $opt in
    d) dur=$OPTARG ;;
    w) warm=$OPTARG ;;
    c) concs=$OPTARG ;;
    n) rounds=$OPTARG ;;
    s) scenarios=$OPTARG ;;
    o) outdir=$OPTARG ;;
    r) compare=$OPTARG ;;
    R) reference=$(realpath "$OPTARG") ;;
    *) exit 2 ;;
  esac
done
if [ -z "$scenarios" ]; then
  scenarios="noop memory redis zipf hot flood cached sidecar"
  [ -n "$reference" ] && scenarios+=" ref ref-window"
fi
want() { [[ " $scenarios " == *" $1 "* ]]; }
if { want ref || want ref-window; } && [ ! -x "$reference" ]; then
  echo "scenarios ref and ref-window need -R with an envoyproxy/ratelimit binary" >&2; exit 2
fi
need_tools redis-server taskset curl

bin=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "$compare" ] && git worktree remove --force "$bin/compare-src" 2>/dev/null
  rm -rf "$bin"
}
trap cleanup EXIT
go build -tags vtprotobuf -o "$bin/" ./cmd/loadgen ./cmd/server ./cmd/localfilter ./bench/report
if [ -n "$compare" ]; then
  git worktree add -q --detach "$bin/compare-src" "$compare"
  mkdir -p "$bin/compare"
  (cd "$bin/compare-src" && go build -tags vtprotobuf -o "$bin/compare/" ./cmd/server ./cmd/localfilter)
fi
mkdir -p "$outdir"
results="$outdir/results.jsonl"
: > "$results"
mkdir -p "$bin/runtime/ratelimit/config"
config="$bin/runtime/ratelimit/config/limits.yaml"
bench_limits "$config"
sidecar_tokens "$bin"
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
  # A hybrid row (it reads a tier's metrics) warms up past its first holds.
  local w=${warm:-1s}
  [[ " $* " == *" -tier-metrics-url "* ]] && w=$(warm_for sidecar "$warm")
  for c in $concs; do
    local conns=$(( c < 4 ? c : 4 ))
    local common=(-target "127.0.0.1:$port" -concurrency "$c" -conns "$conns" -domain bench "$@")
    taskset -c 1 "$bin/loadgen" "${common[@]}" -duration "$w" >/dev/null
    taskset -c 1 "$bin/loadgen" "${common[@]}" -duration "$dur" -label "$label" -cpu-pids "$pids" -json >>"$results"
    echo "  round $round: $label, $c callers" >&2
  done
}
# Key prefixes keep every configuration and round on keys of its own.
servers=("$bin")
[ -n "$compare" ] && servers+=("$bin/compare")
tag() { [ "$1" != "$bin" ] && echo " ($compare)"; true; }
sluiceflags=(-config "$config" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080 -log-level warn)
redisflags=(-redis-addr 127.0.0.1:16399)

echo "scenarios: $scenarios; $rounds round(s) at concurrencies $concs, $dur each" >&2
serve redis redis-server --port 16399 --bind 127.0.0.1 --save '' --appendonly no
wait_port 16399
for round in $(seq "$rounds"); do
  if want noop; then
    serve noop "$bin/loadgen" -serve-noop 127.0.0.1:18081
    wait_port 18081
    points "do-nothing handler" 18081 "$noop" -descriptors 'client=c%d' -keys 10000
    stop "$noop"
  fi
  for dir in "${servers[@]}"; do
    tag=$(tag "$dir"); k="$round${#tag}"
    # This version's servers alone on the Redis: states packed
    # (-redis-state-format; a -r revision from before it writes text).
    packed=()
    "$dir/server" -h 2>&1 | grep -q -- -redis-state-format && packed=(-redis-state-format packed)
    if want memory; then
      serve server "$dir/server" "${sluiceflags[@]}"
      wait_port 18081
      points "sluice, in memory, 10k keys$tag" 18081 "$server" -descriptors "client=m$k.%d" -keys 10000
      stop "$server"
    fi
    if want redis || want zipf || want hot || want flood || want sidecar; then
      serve server "$dir/server" "${sluiceflags[@]}" -redis-url redis://127.0.0.1:16399 -store-timeout 100ms "${packed[@]}" \
        -sidecar-tokens "$bin/tokens" -sidecar-tokens-plaintext
      wait_port 18081
      metrics=(-metrics-url http://127.0.0.1:18080/metrics)
      want redis && points "sluice + Redis, 10k keys$tag" 18081 "$server,$redis" -descriptors "client=r$k.%d" -keys 10000 "${redisflags[@]}" "${metrics[@]}"
      want zipf && points "sluice + Redis, 10k keys zipf$tag" 18081 "$server,$redis" -descriptors "client=z$k.%d" -keys 10000 -dist zipf "${redisflags[@]}" "${metrics[@]}"
      want hot && points "sluice + Redis, one hot key$tag" 18081 "$server,$redis" -descriptors "hot=h$k" -keys 1 "${redisflags[@]}" "${metrics[@]}"
      want flood && points "sluice + Redis, over-limit flood$tag" 18081 "$server,$redis" -descriptors "flood=f$k" -keys 1 "${redisflags[@]}" "${metrics[@]}"
      if want sidecar; then
        for mode in async sync; do
          serve sidecar "$dir/localfilter" -config "$config" -upstream 127.0.0.1:18081 -grpc-addr 127.0.0.1:19081 \
            -http-addr 127.0.0.1:19080 -mode "$mode" -upstream-timeout 100ms -log-level warn \
            -upstream-token-file "$bin/token" -upstream-token-plaintext
          wait_port 19081
          tier=(-tier-metrics-url http://127.0.0.1:19080/metrics -central-pids "$server,$redis")
          points "sidecar $mode, 10k keys uniform$tag" 19081 "$sidecar,$server,$redis" -descriptors "loose=u$mode$k.%d" -keys 10000 "${redisflags[@]}" "${metrics[@]}" "${tier[@]}"
          points "sidecar $mode, 10k keys zipf$tag" 19081 "$sidecar,$server,$redis" -descriptors "loose=z$mode$k.%d" -keys 10000 -dist zipf "${redisflags[@]}" "${metrics[@]}" "${tier[@]}"
          [ $mode = async ] && points "sidecar $mode, 10k keys at half their limit$tag" 19081 "$sidecar,$server,$redis" -descriptors "half=h$mode$k.%d" -keys 10000 "${redisflags[@]}" "${metrics[@]}" "${tier[@]}"
          stop "$sidecar"
        done
      fi
      stop "$server"
    fi
    # (Its -help exits 2: read it whole, not through a pipe pipefail sees.)
    if want cached && [[ $("$dir/server" -help 2>&1 || true) == *-redis-mode* ]]; then
      serve server "$dir/server" "${sluiceflags[@]}" -redis-url redis://127.0.0.1:16399 -store-timeout 100ms -redis-mode cached "${packed[@]}"
      wait_port 18081
      tier=(-metrics-url http://127.0.0.1:18080/metrics -tier-metrics-url http://127.0.0.1:18080/metrics -central-pids "$server,$redis")
      points "sluice + Redis cached, 10k keys$tag" 18081 "$server,$redis" -descriptors "client=a$k.%d" -keys 10000 "${redisflags[@]}" "${tier[@]}"
      points "sluice + Redis cached, 10k keys zipf$tag" 18081 "$server,$redis" -descriptors "client=b$k.%d" -keys 10000 -dist zipf "${redisflags[@]}" "${tier[@]}"
      stop "$server"
    fi
  done
  for variant in ref ref-window; do
    want $variant || continue
    env=(USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:16399
      RUNTIME_ROOT="$bin/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false
      GRPC_HOST=127.0.0.1 GRPC_PORT=18081 HOST=127.0.0.1 PORT=18080 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18070
      LOCAL_CACHE_SIZE_IN_BYTES=1048576)
    name="envoyproxy/ratelimit + Redis"
    if [ $variant = ref-window ]; then
      env+=(REDIS_PIPELINE_WINDOW=150us)
      name="envoyproxy/ratelimit + Redis, 150µs pipeline window"
    fi
    serve ref env "${env[@]}" "$reference"
    wait_port 18081
    points "$name, 10k keys" 18081 "$ref,$redis" -descriptors "client=e$variant$round.%d" -keys 10000 "${redisflags[@]}"
    if want zipf || want cached; then
      points "$name, 10k keys zipf" 18081 "$ref,$redis" -descriptors "client=y$variant$round.%d" -keys 10000 -dist zipf "${redisflags[@]}"
    fi
    points "$name, over-limit flood" 18081 "$ref,$redis" -descriptors "flood=e$variant$round" -keys 1 "${redisflags[@]}"
    stop "$ref"
  done
done
stop "$redis"

refargs=()
if [ -n "$reference" ]; then
  refargs=(-reference "envoyproxy/ratelimit + Redis, 10k keys")
fi
"$bin/report" -in "$results" -md "$outdir/results.md" -svg "$outdir/results.svg" -ceiling "do-nothing handler" "${refargs[@]}"
cat "$outdir/results.md"
echo >&2
echo "written: $results, $outdir/results.md, $outdir/results.svg" >&2
