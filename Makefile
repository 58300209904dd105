GO ?= go

.PHONY: test deps vet unit run bench fuzz

# test: everything CI runs. Installs missing tools first. The end-to-end
# tests run on their own, after the rest: they drive the machine with loads
# and faults of their own (a surge on both cores, Redis frozen) and measure
# what sluice does under them, not under other packages' tests as well.
test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list ./... | grep -v /e2e$$)
	$(GO) test -race -count=1 -timeout 15m ./e2e

deps:
	./scripts/install-test-deps.sh

# run: the server on its embedded in-memory store with the example config.
run:
	$(GO) run ./cmd/server -config envoy/ratelimit-config

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
