#!/usr/bin/env bash
# demo-remote-xdp.sh — the real-NIC recipe (docs/performance.md) for `lbbench xdp
# --remote-xlb` on this machine, with two network namespaces standing in for
# the two hosts and a veth pair for the cable: the load host (namespace
# P-load, port P-p: generator and sink, the backends' addresses 10.77.0.11-14
# answering TCP on 8080 for xlb's health checks) and the xlb host (P-xlb,
# port P-eth1, 10.77.0.2). It builds bin/xlb and bin/lbbench, writes xlb's
# configuration with `lbbench xdp --remote-xlb --xlb-config`, switches its
# zero_copy from "on" to "auto" (veth has no zero-copy: the figures are copy
# mode and say nothing about a NIC), starts `xlb run` in P-xlb and measures
# it from P-load with `lbbench xdp --quick --remote-xlb --xlb-mac`. Needs
# root and python3 (the health-check listener); everything stays inside the
# namespaces, which are removed on every exit path.
set -euo pipefail

PROG=demo-remote-xdp.sh
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=${PREFIX:-zcd}
LOAD=$PREFIX-load
XLB=$PREFIX-xlb
PORT=$PREFIX-p
ETH=$PREFIX-eth1
TMP=$(mktemp -d /tmp/xlb-remote-xdp.XXXXXX)

die() { echo "$PROG: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, XDP, AF_XDP)"
command -v python3 >/dev/null || die "needs python3 (the health checks' listener)"

XPID=
HPID=
cleanup() {
	[ -n "$XPID" ] && kill "$XPID" 2>/dev/null || true
	[ -n "$HPID" ] && kill "$HPID" 2>/dev/null || true
	wait 2>/dev/null || true
	ip netns del "$LOAD" 2>/dev/null || true
	ip netns del "$XLB" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

cd "$ROOT"
go build -o bin/xlb ./cmd/xlb
go build -o bin/lbbench ./cmd/lbbench

for ns in "$LOAD" "$XLB"; do
	ip netns add "$ns"
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	ip -n "$ns" link set lo up
done
ip link add "$PORT" netns "$LOAD" type veth peer name "$ETH" netns "$XLB"
ip -n "$LOAD" link set "$PORT" up
ip -n "$XLB" link set "$ETH" up
for i in 11 12 13 14; do ip -n "$LOAD" addr add "10.77.0.$i/24" dev "$PORT"; done
ip -n "$XLB" addr add 10.77.0.2/24 dev "$ETH"
ip netns exec "$LOAD" python3 -m http.server 8080 --bind 0.0.0.0 >/dev/null 2>&1 &
HPID=$!

# Step 2 of the recipe: the configuration for the xlb host (exits 1 by
# design without --xlb-mac).
ip netns exec "$LOAD" bin/lbbench xdp --gen-iface "$PORT" --remote-xlb --xlb-iface "$ETH" \
	--xlb-config "$TMP/xlb-bench.toml" 2>/dev/null || true
[ -s "$TMP/xlb-bench.toml" ] || die "no configuration written"
sed -i 's/^zero_copy = "on"/zero_copy = "auto"/' "$TMP/xlb-bench.toml"

# Step 3: xlb on the "xlb host".
ip netns exec "$XLB" bin/xlb run -c "$TMP/xlb-bench.toml" >"$TMP/xlb.log" 2>&1 &
XPID=$!
for _ in $(seq 50); do
	[ "$(grep -c 'backend healthy' "$TMP/xlb.log" || true)" -ge 4 ] && break
	kill -0 "$XPID" 2>/dev/null || { cat "$TMP/xlb.log" >&2; die "xlb exited"; }
	sleep 0.2
done

# Step 4: measure.
XMAC=$(ip netns exec "$XLB" cat "/sys/class/net/$ETH/address")
ip netns exec "$LOAD" bin/lbbench xdp --quick --gen-iface "$PORT" --remote-xlb --xlb-mac "$XMAC" --forwarders xlb,xlb-ct
