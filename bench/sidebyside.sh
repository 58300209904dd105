#!/usr/bin/env bash
# sidebyside.sh: the CPU a request of this tree's server against another
# revision's, both running at once on core 0, for levers too small for
# bench/run.sh to see.
#
# On a shared machine one binary's CPU a request moves 20-30 % from minute
# to minute, so two binaries measured one after the other differ by the
# minute more than by a lever of a few percent. Here both servers share
# core 0 at the same time, and its noise: each has its own load generator
# on core 1 (half the callers each, on keys of its own, a warm-up, then the
# measured phase, both at once), and each reports its own server's CPU a
# request (loadgen -cpu-pids). The ratio of the two is steady to within a
# percent from run to run. A server on one port measures a little dearer
# than on the other (about 1 % on this machine), so the runs alternate
# which binary takes which port, and the result is the geometric mean of
# the two orientations' medians, which cancels that.
#
# Scenarios: memory (the in-memory store, 10k keys) and redis (both servers
# on one redis-server, also on core 0, 10k keys each); sidecar: two async
# sidecars (this tree's and REV's localfilter) side by side in front of one
# of this tree's servers on Redis, all on core 0, 10k loose keys each, the
# sidecars' own CPU a request compared.
#
# Usage: bench/sidebyside.sh -r REV [-n 6] [-d 8s] [-w 14s] [-s "memory redis sidecar"]
#   -r  the git revision to measure against (built in a worktree)
#   -n  runs per scenario, alternating the ports (even: at least 2)
#   -d  measured phase; -w warm-up (default: 14s for a sidecar, 2s
#       otherwise: common.sh's warm_for)
# Prints each run's ratio (this tree ÷ REV, CPU a request) and, per
# scenario, the result. A run with a failed request fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
runs=6
dur=8s
warm=""
scenarios="memory redis"
rev=""
while getopts "r:n:d:w:s:" opt; do
  case $opt in
    r) rev=$OPTARG ;;
    n) runs=$OPTARG ;;
    d) dur=$OPTARG ;;
    w) warm=$OPTARG ;;
    s) scenarios=$OPTARG ;;
    *) exit 2 ;;
  esac
done
[ -n "$rev" ] || { echo "usage: bench/sidebyside.sh -r REV [-n runs] [-d 8s] [-w 14s] [-s \"memory redis\"]" >&2; exit 2; }
need_tools redis-server taskset python3

bin=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  git worktree remove --force "$bin/src" 2>/dev/null || true
  rm -rf "$bin"
}
trap cleanup EXIT
go build -tags vtprotobuf -o "$bin/" ./cmd/loadgen ./cmd/server ./cmd/localfilter
mv "$bin/server" "$bin/this"
mv "$bin/localfilter" "$bin/this-sidecar"
cp "$bin/this" "$bin/server"
git worktree add -f -q --detach "$bin/src" "$rev"
(cd "$bin/src" && go build -tags vtprotobuf -o "$bin/before" ./cmd/server && go build -tags vtprotobuf -o "$bin/before-sidecar" ./cmd/localfilter)
bench_limits "$bin/limits.yaml"
sidecar_tokens "$bin"

# one SCENARIO FIRST SECOND TAG: FIRST on port 18081, SECOND on 18083; prints
# SECOND's CPU a request over FIRST's.
one() {
  local scenario=$1 first=$2 second=$3 tag=$4 store=() key=client central=()
  local redis=(-redis-url redis://127.0.0.1:16399 -store-timeout 100ms)
  "$bin/this" -h 2>&1 | grep -q -- -redis-state-format && redis+=(-redis-state-format packed)
  [ "$scenario" = redis ] && store=("${redis[@]}")
  local ports=(18081 18083)
  if [ "$scenario" = sidecar ]; then
    # One server of this tree's behind both sidecars; they are compared.
    taskset -c 0 "$bin/server" -config "$bin/limits.yaml" -grpc-addr 127.0.0.1:18085 -http-addr 127.0.0.1:18084 -log-level warn "${redis[@]}" \
      -sidecar-tokens "$bin/tokens" -sidecar-tokens-plaintext >/dev/null 2>&1 &
    central=($!)
    wait_port 18085
    first=$first-sidecar second=$second-sidecar key=loose ports=(19081 19083)
    local sc=(-config "$bin/limits.yaml" -upstream 127.0.0.1:18085 -mode async -upstream-timeout 100ms -log-level warn
      -upstream-token-file "$bin/token" -upstream-token-plaintext)
    taskset -c 0 "$bin/$first" "${sc[@]}" -grpc-addr 127.0.0.1:19081 -http-addr 127.0.0.1:19080 >/dev/null 2>&1 &
    local p1=$!
    taskset -c 0 "$bin/$second" "${sc[@]}" -grpc-addr 127.0.0.1:19083 -http-addr 127.0.0.1:19082 >/dev/null 2>&1 &
    local p2=$!
  else
    taskset -c 0 "$bin/$first" -config "$bin/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080 -log-level warn "${store[@]}" >/dev/null 2>&1 &
    local p1=$!
    taskset -c 0 "$bin/$second" -config "$bin/limits.yaml" -grpc-addr 127.0.0.1:18083 -http-addr 127.0.0.1:18082 -log-level warn "${store[@]}" >/dev/null 2>&1 &
    local p2=$!
  fi
  wait_port "${ports[0]}"
  wait_port "${ports[1]}"
  local tier1="" tier2=""
  # A sidecar's run in which it decided anything without the servers fails.
  [ "$scenario" = sidecar ] && tier1=http://127.0.0.1:19080/metrics tier2=http://127.0.0.1:19082/metrics
  load_pair "$bin" "$(warm_for "$scenario" "$warm")" "$dur" "${ports[0]}" "$key=$tag.1.%d" "$p1" "$tier1" "${ports[1]}" "$key=$tag.2.%d" "$p2" "$tier2" \
    -concurrency 32 -conns 2 -domain bench -keys 10000
  kill $p1 $p2 "${central[@]}"
  wait $p1 $p2 "${central[@]}" 2>/dev/null || true
  pair_ratio "$bin"
}

if [[ " $scenarios " == *" redis "* || " $scenarios " == *" sidecar "* ]]; then
  taskset -c 0 redis-server --port 16399 --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
  wait_port 16399
fi
echo "this tree ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified')) against $rev: CPU a request, side by side on core 0; $runs runs a scenario of $dur"
for scenario in $scenarios; do
  ratios=()
  for i in $(seq "$runs"); do
    if (( i % 2 )); then
      read -r r c1 c2 q1 q2 < <(one "$scenario" before this "s$scenario$i$RANDOM")
      echo "  $scenario run $i: $rev on the first port ${c1} µs, this on the second ${c2} µs ($q1 and $q2 req/s): this ÷ $rev = $r"
      ratios+=("a$r")
    else
      read -r r c1 c2 q1 q2 < <(one "$scenario" this before "s$scenario$i$RANDOM")
      echo "  $scenario run $i: this on the first port ${c1} µs, $rev on the second ${c2} µs ($q1 and $q2 req/s): this ÷ $rev = $(python3 -c "print('%.4f' % (1 / $r))")"
      ratios+=("b$r")
    fi
  done
  orientations "$scenario" this "this ÷ $rev" "${ratios[@]}"
done
