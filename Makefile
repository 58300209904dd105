GO ?= go

.PHONY: test soak deps fmt vet unit run bench fuzz

FUZZTIME ?= 30s

# GOTAGS: vtprotobuf gives go-control-plane's Envoy messages the encoders
# vtprotobuf generates, which pkg/wire's codec writes replies with (about 4 %
# less CPU a request, BENCHMARKS.md); the Dockerfile and bench/ build so
# too. A build without it writes the same bytes, slower.
GOTAGS ?= vtprotobuf

# test: everything CI runs. Installs missing tools first. The end-to-end
# tests run beside the other packages' tests: they drive the machine with
# loads and faults of their own (a surge on both cores, Redis frozen) and
# state bounds that hold however busy the cores are, so other work on the
# machine is one more load, not a reason to fail (they pass ten runs in a
# row with two busy loops on the cores).
# pkg/wire runs once more without GOTAGS: its encoder without vtprotobuf's.
test: deps fmt
	$(GO) vet -tags $(GOTAGS) ./...
	$(GO) test -tags $(GOTAGS) -race -count=1 -timeout 15m ./...
	$(GO) test -count=1 ./pkg/wire

# soak: what make test leaves out because it takes long, tagged soak: the
# exactness matrix (every deployment, algorithm, traffic shape and server
# count against an exact limiter: 31 minutes at 3 runs a cell, idle) and the
# long fault and bound tests. SOAKFLAGS reach the e2e package, e.g.
# SOAKFLAGS='-matrix.runs 1 -matrix.out /tmp/matrix.md'.
soak: deps
	$(GO) test -race -tags soak,$(GOTAGS) -count=1 -timeout 30m $$($(GO) list ./... | grep -v /e2e$$)
	$(GO) test -tags soak,$(GOTAGS) -count=1 -timeout 4h ./e2e -v $(SOAKFLAGS)

deps:
	./scripts/install-test-deps.sh

# unit: the fast tests, with nothing installed: those that need
# redis-server, docker-compose or the built binaries (e2e/) are skipped,
# saying so (-short). make test runs everything.
unit:
	$(GO) test -tags $(GOTAGS) -short -count=1 ./...

vet:
	$(GO) vet -tags $(GOTAGS) ./...

# fmt: fails naming the files gofmt would change.
fmt:
	@files=$$(gofmt -l .); if [ -n "$$files" ]; then echo "gofmt -w these files:"; echo "$$files"; exit 1; fi

# fuzz: each fuzz target for FUZZTIME (default 30s); the Redis one needs
# redis-server (make deps).
fuzz:
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./pkg/config
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzGlob$$' -fuzztime $(FUZZTIME) ./pkg/config
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzUnmarshal$$' -fuzztime $(FUZZTIME) ./pkg/wire
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzRateLimitReset$$' -fuzztime $(FUZZTIME) ./pkg/retry
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzShouldRateLimit$$' -fuzztime $(FUZZTIME) ./pkg/rls
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzShouldRateLimitRedis$$' -fuzztime $(FUZZTIME) ./pkg/rls
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzDemandReport$$' -fuzztime $(FUZZTIME) ./pkg/rls
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzRecordMetadata$$' -fuzztime $(FUZZTIME) ./pkg/rls
	$(GO) test -tags $(GOTAGS) -run '^$$' -fuzz '^FuzzTokens$$' -fuzztime $(FUZZTIME) ./pkg/peerauth

# run: the server on its embedded in-memory store with the example config.
run:
	$(GO) run -tags $(GOTAGS) ./cmd/server -config envoy/ratelimit-config

bench:
	$(GO) test -tags $(GOTAGS) -run '^$$' -bench . -benchmem ./...
