# Sourced by bench/run.sh and bench/sidebyside.sh: what both need.

# wait_port PORT: wait up to 10 s for something to listen on loopback PORT.
wait_port() {
  for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "nothing listens on :$1" >&2; exit 1
}

# sidecar_tokens DIR: a sidecar's credentials, DIR/tokens for the servers'
# -sidecar-tokens and DIR/token for the sidecar's -upstream-token-file: a
# server takes records (and answers with shares and holds) only from
# sidecars it knows. Plaintext on loopback.
sidecar_tokens() {
  echo "bench-sidecar $(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$1/tokens"
  cut -d' ' -f2 "$1/tokens" > "$1/token"
}
