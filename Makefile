# xlb — see README.md. Every target works on a fresh clone with Go 1.26.
GO        ?= go
STATICCHECK_VERSION := v0.8.2
PKGS      := ./...

.PHONY: all build install install-check test test-short e2e bench lbbench gobench lint demo demo-fleet demo-sim fuzz clean

all: build

# Where `make install` puts things; DESTDIR is prefixed to each (packaging).
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
DESTDIR    ?=

# `xlb version` reads the commit from what the toolchain stamps
# (-buildvcs); where it stamps nothing (a git worktree, GOFLAGS=-buildvcs=false)
# from these.
GIT_COMMIT   := $(shell git rev-parse HEAD 2>/dev/null)
GIT_MODIFIED := $(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo true)
XLB_LDFLAGS  := -X main.buildCommit=$(GIT_COMMIT) -X main.buildModified=$(GIT_MODIFIED)

# Without cgo: a static binary, the same on every distribution. Any build
# drops its capabilities on every thread once started (psx); the cgo ones
# (a plain `go build` where gcc is, `-race`) as well.
build:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -ldflags '$(XLB_LDFLAGS)' -o bin/xlb ./cmd/xlb
	$(GO) build -o bin/lbbench ./cmd/lbbench

# The binary, an example configuration (never over an existing one), the
# systemd unit with this PREFIX's and SYSCONFDIR's paths and the user it
# runs as (sysusers.d).
install: build
	install -d '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(SYSCONFDIR)/xlb' '$(DESTDIR)$(UNITDIR)' '$(DESTDIR)$(SYSUSERSDIR)'
	install -m 0755 bin/xlb '$(DESTDIR)$(BINDIR)/xlb'
	@if [ -e '$(DESTDIR)$(SYSCONFDIR)/xlb/xlb.toml' ]; then \
		install -m 0644 testdata/config/example.toml '$(DESTDIR)$(SYSCONFDIR)/xlb/xlb.toml.example'; \
		echo "kept $(DESTDIR)$(SYSCONFDIR)/xlb/xlb.toml; the example is xlb.toml.example"; \
	else \
		install -m 0644 testdata/config/example.toml '$(DESTDIR)$(SYSCONFDIR)/xlb/xlb.toml'; \
		echo "installed the example $(DESTDIR)$(SYSCONFDIR)/xlb/xlb.toml: edit it (dataplane.interface, services)"; \
	fi
	sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/etc/xlb/|$(SYSCONFDIR)/xlb/|g' packaging/xlb.service > '$(DESTDIR)$(UNITDIR)/xlb.service'
	chmod 0644 '$(DESTDIR)$(UNITDIR)/xlb.service'
	install -m 0644 packaging/xlb.sysusers '$(DESTDIR)$(SYSUSERSDIR)/xlb.conf'
	@echo "then: systemd-sysusers && systemctl daemon-reload && systemctl enable --now xlb"

# make install into a temporary DESTDIR, and what it installed checked.
install-check:
	@./scripts/install-check.sh

# The whole proof: vet, race-checked unit and rule tests (the table and the
# data plane also in the test-only conntrack layout, xlb_ct_layout_alt),
# every benchmark once (so none rots), the golden sim scenarios, and short
# fuzz runs. The end-to-end package is named first so that it is built and
# started first: it is the longest (6-9 minutes under -race); started
# last, as the package order had it, one core idled behind it.
test: build
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 ./scripts/e2e/ $(PKGS)
	$(GO) test -race -count=1 -tags xlb_ct_layout_alt ./conntrack/ ./dataplane/...
	$(GO) test -run '^$$' -bench . -benchtime=1x $(PKGS)
	$(MAKE) --no-print-directory fuzz FUZZTIME=100000x

test-short:
	$(GO) test -count=1 $(PKGS)

# Only the end-to-end tests (root): real TCP/UDP through xlb in the test bed.
# `make test` runs them too.
e2e:
	$(GO) test -race -count=1 -v ./scripts/e2e/

# A count (Nx), not a duration: go1.26's fuzz coordinator can fail a clean
# run with "context deadline exceeded" when a duration expires
# (golang/go#75804). `make fuzz FUZZTIME=2000000x` explores longer. New
# interesting inputs are minimized by count too: minimizing is not counted
# in FUZZTIME and would otherwise take up to a minute per input.
FUZZTIME ?= 1000000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./config/
	$(GO) test -run '^$$' -fuzz '^FuzzFastTree$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./config/
	$(GO) test -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./maglev/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./dataplane/packet/
	$(GO) test -run '^$$' -fuzz '^FuzzEngine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./dataplane/
	$(GO) test -run '^$$' -fuzz '^FuzzProgram$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./dataplane/decap/
	$(GO) test -run '^$$' -fuzz '^FuzzOpenHeader$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./conntrack/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./controlplane/flowsync/
	$(GO) test -run '^$$' -fuzz '^FuzzServerID$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 500x ./quiclb/

# A short lbbench run of each command (the xdp one needs root and says so
# otherwise); `make lbbench` is the full run with charts in bench-out/;
# `make gobench` runs every Go benchmark with allocation counts.
bench:
	$(GO) build -o bin/lbbench ./cmd/lbbench
	./bin/lbbench core --quick
	./bin/lbbench maglev --quick
	./bin/lbbench control --quick
	@if [ "$$(id -u)" = 0 ]; then ./bin/lbbench xdp --quick; else echo "lbbench xdp: skipped (needs root: sudo env \"PATH=$$PATH\" make bench)"; fi

lbbench:
	$(GO) build -o bin/lbbench ./cmd/lbbench
	./bin/lbbench core --plot bench-out
	./bin/lbbench maglev --plot bench-out
	./bin/lbbench control --plot bench-out
	./bin/lbbench xdp --plot bench-out

gobench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

# Real traffic on this machine: the namespace test bed, `xlb run` on the
# balancer's veth, 1000 TCP connections and UDP exchanges to the VIP, counts
# per backend next to the predicted shares, then teardown. Needs root; the
# script builds what it runs and says so when it is not root.
demo:
	@./scripts/demo.sh

# A fleet on this machine: a router (BIRD 2) spreading clients over three
# xlb instances that announce the VIPs over BGP; connections spread, then
# kill -9 of one instance and a drain of another under 300 long-lived
# connections, with what survived. Needs root and BIRD 2.
demo-fleet:
	@./scripts/demo-fleet.sh

# The demo scenario replayed through the real engine (`xlb sim`): no root.
demo-sim: build
	@./scripts/demo-sim.sh

clean:
	rm -rf bin bench-out
