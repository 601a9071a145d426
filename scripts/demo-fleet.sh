#!/usr/bin/env bash
# demo-fleet.sh — `make demo-fleet`: three xlb instances behind a router,
# on this machine. It builds bin/xlb and bin/xlb-testserver, brings up the
# fleet test bed (scripts/testbed.sh --instances 3, prefix xlbfleet: a
# client, a router running BIRD 2, instances l1-l3, backends b1-b3 in
# network namespaces; b4 joins the services in step 4), runs `xlb run` in each instance with the same
# services and a [bgp] section (AS 65010 to the router's AS 65000, hold
# time 3 s, graceful shutdown 2 s), waits until the router has one ECMP
# route to the VIPs over all three, and then:
#
#   1. opens 600 new connections from the client and prints how they
#      spread over the instances (their counters) and the backends, and
#      `xlb status --fleet` (every instance builds the same tables);
#   2. keeps 300 long-lived connections (a request every 100 ms each) and a
#      new connection every 20 ms, kills l1 with kill -9, and prints how
#      many long-lived connections survived and how long new ones failed;
#   3. drains l2 with `xlb drain --node` and prints that none broke;
#   4. the combined event, twice: the fleet started afresh over b1-b3 with
#      300 long-lived connections, b4 added on every instance by a reload,
#      then l1 killed with kill -9; once without [flow_sync] and once with
#      it, printing how many long-lived connections each lost.
#
# Everything is torn down on every exit path. Needs root and BIRD 2.
set -euo pipefail

PROG=demo-fleet.sh
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=xlbfleet
VIP4=10.99.0.10
VIP6=fd00:99::10
CLIENT=$PREFIX-c1
ROUTER=$PREFIX-r
RUN=/run/xlb-testbed-$PREFIX
ADMIN_PORT=9110
N_NEW=600
N_LONG=300
# config's choices: the services' backends (3: b1-b3, 4: b1-b4), and
# whether [flow_sync] is on.
N_BACKENDS=3
SYNC=0

die() { echo "$PROG: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] ||
	die "needs root (network namespaces, veths, XDP, AF_XDP): run it as root, e.g. sudo env \"PATH=\$PATH\" make demo-fleet"
command -v go >/dev/null || die "needs the go command (Go 1.26) in PATH to build xlb; with sudo: sudo env \"PATH=\$PATH\" make demo-fleet"
command -v ip >/dev/null || die "needs iproute2 (ip)"
command -v bird >/dev/null || die "needs BIRD 2 as the router (bird, birdc; Debian: apt-get install bird2)"

cd "$ROOT"
START=$SECONDS
TMP=$(mktemp -d /tmp/xlb-demo-fleet.XXXXXX)
declare -A XLB_PID=()
HOLD_PID=

cleanup() {
	local rc=$? j
	trap - EXIT INT TERM
	echo
	echo "== tearing down"
	[ -n "$HOLD_PID" ] && kill -TERM "$HOLD_PID" 2>/dev/null || true
	for j in "${!XLB_PID[@]}"; do kill -TERM "${XLB_PID[$j]}" 2>/dev/null || true; done
	for j in "${!XLB_PID[@]}"; do
		for _ in $(seq 50); do kill -0 "${XLB_PID[$j]}" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "${XLB_PID[$j]}" 2>/dev/null || true
	done
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ] && [ "$rc" -ne 143 ]; then
		for j in 1 2 3; do
			[ -s "$TMP/l$j.log" ] && { echo "xlb log of l$j, last lines:"; tail -n 10 "$TMP/l$j.log"; }
		done
	fi
	scripts/testbed.sh down --prefix "$PREFIX" || rc=1
	rm -rf "$TMP"
	case $rc in
	0) echo "demo-fleet done in $((SECONDS - START))s" ;;
	130 | 143) echo "demo-fleet interrupted after $((SECONDS - START))s" ;;
	*) echo "demo-fleet FAILED after $((SECONDS - START))s" ;;
	esac
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# admin J PATH: GET from instance lJ's admin listener (from inside its
# namespace, on loopback; bash's /dev/tcp, no curl needed). Prints the body.
admin() {
	ip netns exec "$PREFIX-l$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1 && printf "GET %s HTTP/1.0\r\nHost: x\r\n\r\n" "$2" >&3 && cat <&3' \
		_ "$ADMIN_PORT" "$2" 2>/dev/null | sed '1,/^\r$/d'
}
# newconns J: instance lJ's recorded connections, every service and backend.
newconns() {
	admin "$1" /metrics | awk '/^xlb_backend_new_connections_total\{/ { s += $2 } END { print s + 0 }'
}
# vias FAMILY VIP: the router's next hops to VIP, as instance names.
vias() {
	ip -n "$ROUTER" "$1" route show to "$2" | grep -o 'via [0-9a-f.:]*' |
		awk '{ n = split($2, a, /[.:]/); print "l" (a[n] - 1) }' | sort | paste -sd ' '
}
# wait_vias WANT: until the router routes both VIPs via exactly WANT ("l1 l2 l3").
wait_vias() {
	for _ in $(seq 600); do
		[ "$(vias -4 "$VIP4")" = "$1" ] && [ "$(vias -6 "$VIP6")" = "$1" ] && return 0
		sleep 0.05
	done
	die "the router's routes to the VIPs are via '$(vias -4 "$VIP4")' and '$(vias -6 "$VIP6")', not '$1', after 30s"
}
# report: ask hold for its phase report (SIGUSR1) and print it.
PHASE=0
report() {
	PHASE=$((PHASE + 1))
	kill -USR1 "$HOLD_PID"
	for _ in $(seq 100); do
		[ "$(grep -c "^phase $PHASE: new" "$TMP/hold.out")" -ge 1 ] && break
		sleep 0.05
	done
	grep "^phase $PHASE" "$TMP/hold.out" | sed 's/^/   /'
}

# endpoints SUFFIX FAMILY: the services' endpoints b1..b$N_BACKENDS.
endpoints() {
	local i sep=""
	for i in $(seq "$N_BACKENDS"); do
		if [ "$2" = 4 ]; then printf '%s{ name = "b%d%s", ip = "10.97.0.%d" }' "$sep" "$i" "$1" $((10 + i))
		else printf '%s{ name = "b%d%s", ip = "fd00:97::%d" }' "$sep" "$i" "$1" $((10 + i)); fi
		sep=", "
	done
}

config() {
	local j=$1
	cat <<-EOF
	[dataplane]
	interface = "$PREFIX-l${j}eth"
	queues = "all"
	xdp_mode = "native"
	ring_size = 512
	conntrack_capacity = 65536
	state_dir = "$TMP/l$j.state"     # one each: the default, /run/xlb, is the host's

	[admin]
	listen = "0.0.0.0:$ADMIN_PORT"   # read-only: the router for status --fleet
	socket = "$TMP/l$j.sock"         # drain --node (the instances share the file system)

	[[health_check]]
	name = "hc"
	type = "HTTP"
	port = 80
	request_path = "/healthz"
	check_interval_sec = 1
	timeout_sec = 1
	healthy_threshold = 1

	[[backend_service]]
	name = "web"
	protocol = "TCP"
	health_checks = ["hc"]
	  [[backend_service.backend]]
	  group = "primary"
	  endpoints = [ $(endpoints "" 4) ]

	[[backend_service]]
	name = "web6"
	protocol = "TCP"
	health_checks = ["hc"]
	  [[backend_service.backend]]
	  group = "primary"
	  endpoints = [ $(endpoints -v6 6) ]

	[[forwarding_rule]]
	name = "web-v4"
	ip_address = "$VIP4"
	ip_protocol = "TCP"
	ports = ["80"]
	backend_service = "web"

	[[forwarding_rule]]
	name = "web-v6"
	ip_address = "$VIP6"
	ip_protocol = "TCP"
	ports = ["80"]
	backend_service = "web6"

	[bgp]
	asn = 65010
	hold_time_sec = 3
	graceful_shutdown_sec = 2
	  [[bgp.neighbor]]
	  address = "10.97.0.1"
	  asn = 65000
	EOF
	[ "$SYNC" = 1 ] && cat <<-EOF

	[flow_sync]
	listen = "10.97.0.$((1 + j)):7300"
	peers = ["10.97.0.2:7300", "10.97.0.3:7300", "10.97.0.4:7300"]
	key_file = "$TMP/flow-sync.key"
	pull_on_start = true
	pull_timeout_sec = 3
	EOF
	return 0
}

# start_xlb J: xlb run in lJ, on a fresh state_dir, until it serves /healthz.
start_xlb() {
	local j=$1 i
	rm -rf "$TMP/l$j.state"
	config "$j" >"$TMP/l$j.toml"
	ip netns exec "$PREFIX-l$j" bin/xlb run -c "$TMP/l$j.toml" >"$TMP/l$j.log" 2>&1 &
	XLB_PID[$j]=$!
	for i in $(seq 200); do
		kill -0 "${XLB_PID[$j]}" 2>/dev/null || { cat "$TMP/l$j.log" >&2; die "xlb in l$j exited (log above)"; }
		[ "$(admin "$j" /healthz)" = ok ] && return 0
		sleep 0.1
	done
	die "xlb in l$j did not serve /healthz within 20s"
}

# stop_xlb J: SIGTERM to lJ's xlb, and wait until it is gone.
stop_xlb() {
	kill -TERM "${XLB_PID[$1]}" 2>/dev/null || true
	wait "${XLB_PID[$1]}" 2>/dev/null || true
	unset "XLB_PID[$1]"
}

# start_hold: N_LONG long-lived connections and the stream, reporting in phases.
start_hold() {
	local i
	PHASE=0
	ip netns exec "$CLIENT" bin/xlb-testserver hold --tcp "$VIP4:80,[$VIP6]:80" -n "$N_LONG" >"$TMP/hold.out" 2>&1 &
	HOLD_PID=$!
	for i in $(seq 200); do
		kill -0 "$HOLD_PID" 2>/dev/null || { cat "$TMP/hold.out" >&2; die "hold failed (above)"; }
		grep -q 'long-lived connections open' "$TMP/hold.out" && return 0
		sleep 0.1
	done
	die "the long-lived connections did not open within 20s"
}

stop_hold() {
	kill -TERM "$HOLD_PID"
	wait "$HOLD_PID" || true
	HOLD_PID=
}

# fleet_agrees: until `xlb status --fleet` from the router sees the same
# tables on every instance.
fleet_agrees() {
	local i
	for i in $(seq 300); do
		ip netns exec "$ROUTER" bin/xlb status --fleet "10.97.0.2:$ADMIN_PORT,10.97.0.3:$ADMIN_PORT,10.97.0.4:$ADMIN_PORT" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "the instances' tables still differ 30s after the reload"
}

# combined SYNC LABEL: the fleet afresh with [flow_sync] off (0) or on (1),
# 300 long-lived connections, b4 added everywhere by a reload, then kill -9
# of l1. Sets LOST to the long-lived connections that broke or changed
# backend.
combined() {
	local j line
	SYNC=$1 N_BACKENDS=3
	for j in "${!XLB_PID[@]}"; do stop_xlb "$j"; done
	wait_vias ""
	for j in 1 2 3; do start_xlb "$j"; done
	wait_vias "l1 l2 l3"
	start_hold
	sed 's/^/   /' "$TMP/hold.out"
	sleep 1
	N_BACKENDS=4
	for j in 1 2 3; do
		config "$j" >"$TMP/l$j.toml"
		kill -HUP "${XLB_PID[$j]}"
	done
	sleep 2 # b4's first health check
	fleet_agrees
	echo "   b4 added on l1, l2 and l3 by a reload; every instance has the same tables again:"
	report
	t0=$(date +%s.%N)
	kill -KILL "${XLB_PID[1]}"
	wait "${XLB_PID[1]}" 2>/dev/null || true
	unset 'XLB_PID[1]'
	wait_vias "l2 l3"
	echo "   kill -9 of l1: the router dropped its route $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s later"
	sleep 6
	report
	line=$(grep "^phase $PHASE (" "$TMP/hold.out")
	LOST=$(sed -E 's/.* ([0-9]+) broke, ([0-9]+) changed backend.*/\1 \2/' <<<"$line" | awk '{ print $1 + $2 }')
	stop_hold
}

echo "== building bin/xlb and bin/xlb-testserver"
go build -o bin/xlb ./cmd/xlb
go build -o bin/xlb-testserver ./cmd/xlb-testserver
export XLB_TESTSERVER=$ROOT/bin/xlb-testserver

echo
echo "== fleet test bed: client c1 -> router r (BIRD, AS 65000, ECMP on the 5-tuple) -> instances l1-l3 -> backends b1-b3"
scripts/testbed.sh down --prefix "$PREFIX" >/dev/null
scripts/testbed.sh up --prefix "$PREFIX" --instances 3 --backends 4 --failover 0
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/flow-sync.key"
echo >>"$TMP/flow-sync.key"
chmod 600 "$TMP/flow-sync.key"

echo
echo "== xlb run in l1, l2, l3 (same services; [bgp] AS 65010, hold time 3 s, graceful shutdown 2 s)"
for j in 1 2 3; do start_xlb "$j"; done
t0=$SECONDS
wait_vias "l1 l2 l3"
echo "every instance announces both VIPs; the router's ECMP routes (after $((SECONDS - t0))s):"
ip -n "$ROUTER" -4 route show to "$VIP4" | sed 's/^/   /'
ip -n "$ROUTER" -6 route show to "$VIP6" | sed 's/^/   /'
ip netns exec "$ROUTER" birdc -s "$RUN/bird.ctl" show protocols | sed 's/^/   /'

echo
echo "== 1. $N_NEW new connections (HTTP GET /) to $VIP4:80 from c1"
for j in 1 2 3; do before[$j]=$(newconns "$j"); done
probe=$(ip netns exec "$CLIENT" bin/xlb-testserver probe --tcp "$VIP4:80" -n "$N_NEW" --parallel 16) || die "some connections failed: $probe"
for j in 1 2 3; do
	n=$(($(newconns "$j") - before[$j]))
	printf '   instance l%d: %4d connections (%s%%)\n' "$j" "$n" "$(awk -v n="$n" -v t="$N_NEW" 'BEGIN { printf "%.1f", 100 * n / t }')"
done
awk '$2 ~ /^b[0-9]+$/ { printf "   backend  %s: %4d connections (%.1f%%)\n", $2, $3, 100 * $3 / '"$N_NEW"' }' <<<"$probe"
echo "The router spreads connections over the instances (ECMP); each instance picks the backend by"
echo "Maglev over the same table, so a connection's backend does not depend on the instance it crosses:"
ip netns exec "$ROUTER" bin/xlb status --fleet "10.97.0.2:$ADMIN_PORT,10.97.0.3:$ADMIN_PORT,10.97.0.4:$ADMIN_PORT" | sed 's/^/   /'

echo
echo "== 2. $N_LONG long-lived connections (a request every 100 ms each, IPv4 and IPv6) and a new connection every 20 ms"
start_hold
sed 's/^/   /' "$TMP/hold.out"
sleep 2
report

echo
echo "== kill -9 of l1 (pid ${XLB_PID[1]})"
t0=$(date +%s.%N)
kill -KILL "${XLB_PID[1]}"
wait "${XLB_PID[1]}" 2>/dev/null || true
unset 'XLB_PID[1]'
wait_vias "l2 l3"
echo "   the router dropped l1's route $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s after the kill (its kernel closed the BGP session)"
echo "   l1's connections now cross l2 and l3, which find no tracking entry for them and pick the same backend"
sleep 6
report

echo
echo "== xlb drain --node on l2: it withdraws its routes and keeps forwarding"
t0=$(date +%s.%N)
ip netns exec "$PREFIX-l2" bin/xlb drain --node --socket "$TMP/l2.sock" | sed 's/^/   /'
wait_vias "l3"
echo "   the router routes the VIPs via l3 alone $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s later"
sleep 4
report

stop_hold
echo
echo "== xlb status in l2 (drained): its BGP section"
ip netns exec "$PREFIX-l2" bin/xlb status --admin "127.0.0.1:$ADMIN_PORT" | sed -n '/^bgp:/,$p' | sed 's/^/   /'

echo
echo "== 4. events combined: b4 added on every instance by a reload, then kill -9 of l1"
echo "   (the flows the router moves off l1 reach instances that never saw them; with b4 in"
echo "   the tables, Maglev now sends some of them to another backend than their own)"
echo
echo "-- without [flow_sync]: the fleet afresh over b1-b3"
combined 0
without=$LOST
echo
echo "-- with [flow_sync] (every instance sends its tracked flows to the others; l1 pulls on start)"
combined 1
with=$LOST
echo
echo "== combined event, long-lived connections lost (broken or moved to another backend), of $N_LONG:"
echo "   without [flow_sync]: $without"
echo "   with [flow_sync]:    $with"
