# LM Warden. A newcomer runs two commands: `make demo` and `make test`.
GO      ?= go
BIN     := bin/lmwarden
PKGS    := ./...
# The whole suite, BPF tests included, must fit CI's 90 minutes with room.
TESTTIMEOUT ?= 30m

.PHONY: all build test check generate bench demo deps clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/lmwarden

# deps installs only what is missing (Debian packages, npm clients, bpffs).
deps:
	bash scripts/deps.sh

# check is what keeps the house in order without running a test: gofmt,
# go.mod says what the code imports (tidy leaves no diff), the committed
# bpf2go output is what the C builds to (where clang is installed), vet, and
# staticcheck (a `go tool` dependency pinned in go.mod, so every machine
# runs the same one).
check:
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l .); if [ -n "$$unformatted" ]; then echo "gofmt -w these:" $$unformatted; exit 1; fi
	$(GO) mod tidy -diff
	bash bpf/check-generated.sh
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

test: deps check
	$(GO) test -count=1 -timeout $(TESTTIMEOUT) $(PKGS)

# generate rebuilds the bpf2go output (needs clang); the output is committed,
# so `go build` never needs clang.
generate:
	$(GO) generate ./bpf/...

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./agent/ ./l7/ ./sim/

demo: build
	./$(BIN) demo

clean:
	rm -rf bin out
