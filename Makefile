GO ?= go

.PHONY: test deps vet unit run bench fuzz

# test: everything CI runs. Installs missing tools first.
test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

deps:
	./scripts/install-test-deps.sh

# run: the server on its embedded in-memory store with the example config.
run:
	$(GO) run ./cmd/server -config envoy/ratelimit-config

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
