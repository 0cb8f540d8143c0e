# LM Warden. A newcomer runs two commands: `make demo` and `make test`.
GO      ?= go
BIN     ?= bin/lmwarden
# What `lmwarden --version` and lmwarden_build_info say: the release tag
# (git describe), and the commit with -dirty for a modified tree.
VERSION  ?= $(shell git describe --tags --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git describe --always --dirty --abbrev=12 --match=no-tag-matches 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.revision=$(REVISION)
PKGS    := ./...
# The whole suite, BPF tests included, must fit CI's 90 minutes with room.
TESTTIMEOUT ?= 30m

.PHONY: all build install test soak check generate bench demo deps clean kernels

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/lmwarden

# install puts the binary, the systemd unit, the sample config (only when
# none is there yet) and the docs in place; DESTDIR stages it elsewhere
# (docs/deploy.md). The unit's paths follow PREFIX.
PREFIX  ?= /usr/local
DOCDIR  := $(PREFIX)/share/doc/lmwarden
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/lmwarden
	install -d -m 0755 $(DESTDIR)/etc/systemd/system $(DESTDIR)$(DOCDIR)
	sed 's|/usr/local/|$(PREFIX)/|g' scripts/lmwarden.service > $(DESTDIR)/etc/systemd/system/lmwarden.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/lmwarden.service
	install -m 0644 README.md CHANGELOG.md LICENSE docs/*.md $(DESTDIR)$(DOCDIR)/
	install -d -m 0755 $(DESTDIR)$(DOCDIR)/LICENSES
	install -m 0644 LICENSES/* $(DESTDIR)$(DOCDIR)/LICENSES/
	test -e $(DESTDIR)/etc/lmwarden/lmwarden.yaml || install -D -m 0644 scripts/lmwarden.yaml $(DESTDIR)/etc/lmwarden/lmwarden.yaml

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

# The multi-host goal (three hosts' hit rate within 2 points of one host's)
# is a measurement: it runs alone after the suite, because with every
# package's tests on the same cores one of its 3-host runs can lose a third
# of its hits (seen in make test, not in a run of its own; cause open:
# docs/multihost.md).
MULTIHOST_GOAL = TestMultiHostGoals$$
test: deps check
	$(GO) test -count=1 -timeout $(TESTTIMEOUT) -skip '$(MULTIHOST_GOAL)' $(PKGS)
	$(GO) test -count=1 -timeout $(TESTTIMEOUT) -run '$(MULTIHOST_GOAL)' ./cmd/lmwarden/

# soak is the fault suite's long version (docs/reliability.md): 10,000
# connections with abandoned streams on every datapath, 20,000 idle
# sockets from one client; minutes. The short version runs in make test.
soak: deps
	LMWARDEN_SOAK=1 $(GO) test -count=1 -timeout 60m -v ./faults/

# kernels runs the kernel datapaths' tests in QEMU VMs, one per Debian
# kernel (6.1, 6.12, newer: docs/kernel.md, "Kernels tested"), and prints
# a table of what each kernel runs and passes. It installs QEMU and
# busybox when missing and downloads the kernels through an apt state of
# its own under out/kernels; about an hour on a 2-core machine, so not
# part of test. KERNEL_SUITES, KERNEL_PKGS, KERNEL_TESTS: see the script.
kernels:
	bash scripts/kernels/run.sh

# generate rebuilds the bpf2go output (needs clang); the output is committed,
# so `go build` never needs clang.
generate:
	$(GO) generate ./bpf/...

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./agent/placement/ ./l7/ ./sim/

demo: build
	./$(BIN) demo

clean:
	rm -rf bin out
