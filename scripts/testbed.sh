#!/usr/bin/env bash
# testbed.sh — the xlb test bed: network namespaces on this machine, joined
# by one bridge, with real kernel TCP/UDP stacks on both ends.
#
#   usage: testbed.sh up   [--prefix P] [--clients K] [--backends N] [--failover M]
#                          [--queues Q] [--weights W1,W2,...] [--no-servers]
#                          [--instances I]
#          testbed.sh down [--prefix P]
#          testbed.sh status [--prefix P]
#          testbed.sh start-server [--prefix P] --backend I
#
# Topology (P = prefix, default xlbt; c1, b1 addresses shown, cI and bI count up):
#
#                 namespace P-sw: bridge P-br, the "switch" (no addresses)
#     +----------------+-----------------+----------------+--------- ...
#   P-c1sw          P-lbsw            P-b1sw   ...     P-b4sw
#     | veth           | veth (Q queues)  | veth            | veth
#   P-c1eth         P-lbeth           P-b1eth          P-b4eth
#  [ns P-c1]       [ns P-lb]         [ns P-b1]        [ns P-b4]
#  10.98.0.101/24  10.98.0.2/24      10.97.0.11/24    10.97.0.14/24
#  fd00:98::101/64 10.97.0.2/24      fd00:97::11/64   fd00:97::14/64
#                  fd00:98::2/64     lo: 10.99.0.10   lo: the VIPs too
#                  fd00:97::2/64     lo: fd00:99::10  (failover backend)
#
#   VIPs: 10.99.0.10 and fd00:99::10, held by every backend on lo, by no one
#   on the bridge. Clients 10.98.0.0/24 + fd00:98::/64, backends 10.97.0.0/24
#   + fd00:97::/64, two subnets on one segment.
#
#   client -> VIP:   P-c1 routes the VIPs via 10.98.0.2 / fd00:98::2, the
#                    balancer, as a router would. Frames reach P-lbeth, where
#                    xlb attaches XDP, rewrites the destination MAC to a
#                    backend's (DSR) and sends them back out of P-lbeth: the
#                    balancer is one-armed, like a NIC in a rack.
#   backend -> client: backends route the client subnets on-link over their
#                    own veth, so replies (source: the VIP) go straight to the
#                    client across the bridge and never through P-lbeth.
#   Without xlb the balancer's kernel neither owns the VIPs nor forwards, and
#   blackhole routes make it drop VIP traffic silently in both families (IPv6
#   would otherwise answer "no route" and abort the client's connect): VIP
#   traffic gets no answer at all.
#
#   Backends: arp_ignore=1 / arp_announce=2 and the IPv6 VIP added nodad on lo,
#   so they never answer ARP or NDP for the VIPs (the kernel answers NDP only
#   for addresses on the interface asked). rp_filter is off everywhere
#   (asymmetric paths), ICMP redirects are neither sent by the balancer nor
#   accepted by clients. Clients' veths and P-lbsw have checksum and
#   segmentation offloads off, so frames the XDP program sees carry complete
#   checksums and fit the MTU (a veth otherwise passes partial checksums).
#   Queues: P-lbeth and P-lbsw have Q rx/tx queues (default 2), every other
#   veth one. The bridge hashes flows over P-lbsw's tx queues and each lands
#   on P-lbeth's rx queue of the same index, so native XDP sees every queue
#   used (generic XDP reports queue 0 only). A multi-queue client veth would
#   undo this: its tx queue index rides along and the bridge takes it for a
#   recorded rx queue.
#   Every endpoint MAC is fixed: 02:98:00:00:00:0I for cI, 02:97:00:00:00:02
#   for the balancer, 02:97:00:00:00:XX with XX = hex(10+I) for bI.
#
#   Each backend runs xlb-testserver (cmd/xlb-testserver): HTTP on TCP ports
#   $TB_TCP_PORTS (default "80 8080") answering "backend bI" with X-Backend,
#   /healthz with the weight header, UDP echo "bI: payload" on $TB_UDP_PORTS
#   (default "53"), IPv4 and IPv6. The weight header's value is the content
#   of /run/xlb-testbed-P/bI.weight, read on every /healthz (missing or
#   empty: no header): up writes --weights' value there when it starts a
#   server, and whoever changes the file changes the weight bI reports. Pid
#   files and logs are in /run/xlb-testbed-P/. The binary is
#   $XLB_TESTSERVER, or built there with `go build`.
#
# The fleet bed (--instances I, 1..8): a router between the clients and I
# balancer instances, instead of the one balancer above.
#
#     [ns P-c1] 10.98.0.101 --- bridge P-cbr --- P-rceth 10.98.0.1   [ns P-r]
#                                                P-reth  10.97.0.1   BIRD 2
#     bridge P-br: P-reth, P-l1eth 10.97.0.2 [ns P-l1] ... P-lIeth [ns P-lI],
#                  and the backends P-b1eth ... as above
#
#   Every instance P-lJ has one interface P-lJeth (Q queues; MAC
#   02:97:00:00:01:0J) with 10.97.0.(1+J) and fd00:97::(1+J), and blackhole
#   routes for the VIPs like P-lb; an xlb run in it announces the VIPs over
#   BGP (AS 65010) to the router (10.97.0.1, AS 65000). The router (MACs
#   02:97:00:00:00:01, 02:98:00:00:01:00) forwards, runs BIRD with
#   scripts/bird/bird.conf plus one session per instance, and installs what
#   the instances announce as ECMP routes (merge paths) hashed on layer 4:
#   fib_multipath_hash_policy=3 with fib_multipath_hash_fields=0x37
#   (addresses, protocol, ports), both families. Not policy 1: it takes the
#   hash the client's socket left in the skb, which veths carry across
#   namespaces (a wire never does), and TCP changes it at every
#   retransmission timeout: flows would hop between instances as no real
#   router makes them. Clients route everything via the router; backends
#   send their replies (DSR) to the router too. Its
#   control socket is $RUN/bird.ctl (birdc -s), its log $RUN/bird.log.
#
# start-server starts backend I's server again (after a test killed it),
# with the bed's ports and its weight file as they are; a running server is
# left alone.
#
# up is idempotent: it creates what is missing and leaves what exists (running
# servers included); down removes every namespace and link whose name starts
# with "P-" and the run directory, and is fine when nothing exists.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="testbed.sh"

die() { echo "$PROG: $*" >&2; exit 1; }
usage() {
	cat >&2 <<-EOF
	usage: $PROG up   [--prefix P] [--clients K] [--backends N] [--failover M]
	                     [--queues Q] [--weights W1,W2,...] [--no-servers]
	                     [--instances I]
	       $PROG down [--prefix P]
	       $PROG status [--prefix P]
	       $PROG start-server [--prefix P] --backend I
	EOF
	exit 2
}

# --- addresses (the Go package scripts/testbed mirrors these) -------------
VIP4=10.99.0.10
VIP6=fd00:99::10
LB4C=10.98.0.2
LB6C=fd00:98::2
LB4B=10.97.0.2
LB6B=fd00:97::2
client4() { echo "10.98.0.$((100 + $1))"; }
client6() { echo "fd00:98::$((100 + $1))"; }
clientmac() { printf '02:98:00:00:00:%02x' "$1"; }
backend4() { echo "10.97.0.$((10 + $1))"; }
backend6() { echo "fd00:97::$((10 + $1))"; }
backendmac() { printf '02:97:00:00:00:%02x' "$((10 + $1))"; }
LBMAC=02:97:00:00:00:02
# The fleet bed: the router and the instances.
R4B=10.97.0.1
R6B=fd00:97::1
R4C=10.98.0.1
R6C=fd00:98::1
RMACB=02:97:00:00:00:01
RMACC=02:98:00:00:01:00
instance4() { echo "10.97.0.$((1 + $1))"; }
instance6() { echo "fd00:97::$((1 + $1))"; }
instancemac() { printf '02:97:00:00:01:%02x' "$1"; }

# --- arguments -------------------------------------------------------------
[ $# -ge 1 ] || usage
CMD=$1
shift
PREFIX=xlbt CLIENTS=1 BACKENDS=3 FAILOVER=1 QUEUES=2 WEIGHTS="" SERVERS=1 BACKEND= INSTANCES=0
while [ $# -gt 0 ]; do
	case "$1" in
	--prefix) PREFIX=${2-}; shift 2 || usage ;;
	--clients) CLIENTS=${2-}; shift 2 || usage ;;
	--backends) BACKENDS=${2-}; shift 2 || usage ;;
	--failover) FAILOVER=${2-}; shift 2 || usage ;;
	--queues) QUEUES=${2-}; shift 2 || usage ;;
	--weights) WEIGHTS=${2-}; shift 2 || usage ;;
	--no-servers) SERVERS=0; shift ;;
	--backend) BACKEND=${2-}; shift 2 || usage ;;
	--instances) INSTANCES=${2-}; shift 2 || usage ;;
	-h | --help) usage ;;
	*) echo "$PROG: unknown argument $1" >&2; usage ;;
	esac
done
case "$CMD" in up | down | status | start-server) ;; *) echo "$PROG: unknown command $CMD" >&2; usage ;; esac

# Interface names are at most 15 characters: "P-b50eth" is the longest.
[[ "$PREFIX" =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
	die "--prefix must be 1-8 lowercase letters or digits, starting with a letter (interface names <= 15 chars); got '$PREFIX'"
isnum() { [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] || die "$1 must be a number from $3 to $4; got '$2'"; }
isnum --clients "$CLIENTS" 1 9
isnum --backends "$BACKENDS" 1 49
isnum --failover "$FAILOVER" 0 $((50 - BACKENDS))
isnum --queues "$QUEUES" 1 16
isnum --instances "$INSTANCES" 0 8
NB=$((BACKENDS + FAILOVER))
IFS=, read -r -a WEIGHT <<<"$WEIGHTS"
if [ -n "$WEIGHTS" ]; then
	[ "${#WEIGHT[@]}" -eq "$NB" ] || die "--weights needs $NB values (one per backend), got ${#WEIGHT[@]}"
	for w in "${WEIGHT[@]}"; do isnum "a weight" "$w" 0 1000000; done
fi
TCP_PORTS=${TB_TCP_PORTS-80 8080}
UDP_PORTS=${TB_UDP_PORTS-53}

[ "$(id -u)" -eq 0 ] ||
	die "must run as root: namespaces, veths, a bridge and sysctls need CAP_NET_ADMIN and CAP_SYS_ADMIN (try: sudo $0 $CMD ...)"
command -v ip >/dev/null || die "needs iproute2 (ip)"
if [ "$CMD" = up ] && [ "$INSTANCES" -gt 0 ]; then
	command -v bird >/dev/null || die "--instances needs BIRD 2 as the router (Debian: apt-get install bird2)"
fi

RUN=/run/xlb-testbed-$PREFIX
SW=$PREFIX-sw
LB=$PREFIX-lb

# --- helpers -----------------------------------------------------------------
nsexists() { [ -e "/run/netns/$1" ] && ip netns exec "$1" true 2>/dev/null; }
linkexists() { ip -n "$1" link show dev "$2" >/dev/null 2>&1; }
ourns() { ip netns list | awk '{print $1}' | grep -E "^$PREFIX-" | sort || true; }

ensure_ns() {
	local ns=$1
	nsexists "$ns" || { ip netns del "$ns" 2>/dev/null || true; ip netns add "$ns"; }
	ip -n "$ns" link set lo up
	# Before any link exists, so "default" reaches every link made later.
	ip netns exec "$ns" sysctl -qw \
		net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
		net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
		net.ipv6.conf.lo.accept_dad=0
}

# veth NS NAME PEER MAC QUEUES [BRIDGE]: NAME in NS, PEER a port of the
# bridge (P-br unless BRIDGE says otherwise).
veth() {
	local ns=$1 name=$2 peer=$3 mac=$4 q=$5 br=${6:-$PREFIX-br}
	if ! linkexists "$ns" "$name"; then
		ip link add "$name" netns "$ns" address "$mac" numtxqueues "$q" numrxqueues "$q" type veth \
			peer name "$peer" netns "$SW" numtxqueues "$q" numrxqueues "$q"
	fi
	ip -n "$SW" link set "$peer" master "$br" up
	ip -n "$ns" link set "$name" up
}

# balancer NS IFACE PEER MAC: a balancer's namespace and its one interface.
# Without xlb it neither owns the VIPs nor forwards: VIP traffic is dropped
# silently by blackhole routes.
balancer() {
	local ns=$1
	ensure_ns "$ns"
	ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0 \
		net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0
	veth "$ns" "$2" "$3" "$4" "$QUEUES"
	ip -n "$ns" route replace blackhole "$VIP4/32"
	ip -n "$ns" -6 route replace blackhole "$VIP6/128"
}

# router: the fleet's router namespace, forwarding between the clients'
# bridge and the segment, with BIRD peering with every instance.
router() {
	local ns=$PREFIX-r j
	ensure_ns "$ns"
	ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
		net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0 \
		net.ipv4.fib_multipath_hash_policy=3 net.ipv6.fib_multipath_hash_policy=3 \
		net.ipv4.fib_multipath_hash_fields=55 net.ipv6.fib_multipath_hash_fields=55
	veth "$ns" "$PREFIX-reth" "$PREFIX-rsw" "$RMACB" 1
	veth "$ns" "$PREFIX-rceth" "$PREFIX-rcsw" "$RMACC" 1 "$PREFIX-cbr"
	ip -n "$ns" addr replace "$R4B/24" dev "$PREFIX-reth"
	ip -n "$ns" addr replace "$R6B/64" dev "$PREFIX-reth" nodad
	ip -n "$ns" addr replace "$R4C/24" dev "$PREFIX-rceth"
	ip -n "$ns" addr replace "$R6C/64" dev "$PREFIX-rceth" nodad
	# The repo's router configuration, then this bed's sessions.
	{
		cat "$ROOT/scripts/bird/bird.conf"
		echo
		echo "# Generated by testbed.sh for prefix $PREFIX."
		echo "log \"$RUN/bird.log\" all;"
		echo "router id $R4B;"
		for j in $(seq "$INSTANCES"); do
			echo "protocol bgp l$j from xlb_instance { neighbor $(instance4 "$j") as 65010; }"
		done
	} >"$RUN/bird.conf"
	if ! alive_bird; then
		rm -f "$RUN/bird.pid" "$RUN/bird.ctl"
		ip netns exec "$ns" bird -c "$RUN/bird.conf" -s "$RUN/bird.ctl" -P "$RUN/bird.pid" </dev/null >>"$RUN/bird.log" 2>&1 ||
			die "bird did not start (log: $RUN/bird.log; config: $RUN/bird.conf)"
	else
		ip netns exec "$ns" birdc -s "$RUN/bird.ctl" configure >/dev/null ||
			die "bird: reconfigure failed (config: $RUN/bird.conf)"
	fi
}

# alive_bird: the bed's BIRD runs (its pid file names a bird process).
alive_bird() {
	local pid
	pid=$(cat "$RUN/bird.pid" 2>/dev/null) || return 1
	[[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = bird ]
}

testserver_bin() {
	if [ -n "${XLB_TESTSERVER-}" ]; then
		[ -x "$XLB_TESTSERVER" ] || die "XLB_TESTSERVER=$XLB_TESTSERVER is not an executable"
		echo "$XLB_TESTSERVER"
		return
	fi
	command -v go >/dev/null || die "needs go to build cmd/xlb-testserver (or set XLB_TESTSERVER)"
	(cd "$ROOT" && go build -o "$RUN/xlb-testserver" ./cmd/xlb-testserver >&2) ||
		die "building cmd/xlb-testserver failed"
	echo "$RUN/xlb-testserver"
}

# alive PIDFILE: the pid in it is the server that wrote it (its command line
# names the file), so a recycled pid is never taken for it.
alive() {
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 1
	[[ "$pid" =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--pidfile $1 "
}

join() { local IFS=,; echo "$*"; }

start_server() {
	local i=$1 bin=$2 ns=$PREFIX-b$1 pidf=$RUN/b$1.pid tcp=() udp=() p from
	alive "$pidf" && return 0
	rm -f "$pidf"
	from=$(stat -c %s "$RUN/b$i.log" 2>/dev/null || echo 0)
	for p in $TCP_PORTS; do tcp+=("0.0.0.0:$p" "[::]:$p"); done
	for p in $UDP_PORTS; do udp+=("0.0.0.0:$p" "[::]:$p"); done
	# setsid and no inherited descriptors: the server outlives this script,
	# and a caller reading our output is not kept waiting by it. A restarted
	# server appends to its log, which keeps what came before the restart.
	ip netns exec "$ns" setsid "$bin" serve --name "b$i" --pidfile "$pidf" \
		--listen-tcp "$(join "${tcp[@]}")" --listen-udp "$(join "${udp[@]}")" \
		--weight-file "$RUN/b$i.weight" </dev/null >>"$RUN/b$i.log" 2>&1 &
	# The pid file appears once every socket is bound; the server writes
	# "xlb-testserver: ..." to its log when it gives up (lines after the
	# $from of a restart are this start's).
	for _ in $(seq 100); do
		[ -s "$pidf" ] && return 0
		tail -c +$((from + 1)) "$RUN/b$i.log" 2>/dev/null | grep -q '^xlb-testserver: ' && break
		sleep 0.05
	done
	tail -c +$((from + 1)) "$RUN/b$i.log" >&2
	die "xlb-testserver b$i did not start (log above, $RUN/b$i.log)"
}

# running PID: alive and not a zombie (an init may reap orphans late).
running() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[ "${st%% *}" != Z ]
}

# stop PID...: TERM, then KILL what is left after 2 s.
stop() {
	local pid left
	[ $# -gt 0 ] || return 0
	kill -TERM "$@" 2>/dev/null || true
	for _ in $(seq 40); do
		left=0
		for pid in "$@"; do running "$pid" && left=1; done
		[ "$left" = 0 ] && return 0
		sleep 0.05
	done
	kill -KILL "$@" 2>/dev/null || true
}

# --- up ----------------------------------------------------------------------
up() {
	mkdir -p "$RUN"
	local i ns bin
	ensure_ns "$SW"
	ip netns exec "$SW" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	linkexists "$SW" "$PREFIX-br" ||
		ip -n "$SW" link add "$PREFIX-br" type bridge stp_state 0 mcast_snooping 0
	ip -n "$SW" link set "$PREFIX-br" up

	if [ "$INSTANCES" -eq 0 ]; then
		# The balancer: one interface, both subnets. It forwards nothing itself.
		balancer "$LB" "$PREFIX-lbeth" "$PREFIX-lbsw" "$LBMAC"
		ip -n "$LB" addr replace "$LB4C/24" dev "$PREFIX-lbeth"
		ip -n "$LB" addr replace "$LB4B/24" dev "$PREFIX-lbeth"
		ip -n "$LB" addr replace "$LB6C/64" dev "$PREFIX-lbeth" nodad
		ip -n "$LB" addr replace "$LB6B/64" dev "$PREFIX-lbeth" nodad
		CBR=$PREFIX-br
	else
		# The clients' own segment, behind the router.
		linkexists "$SW" "$PREFIX-cbr" ||
			ip -n "$SW" link add "$PREFIX-cbr" type bridge stp_state 0 mcast_snooping 0
		ip -n "$SW" link set "$PREFIX-cbr" up
		CBR=$PREFIX-cbr
		for j in $(seq "$INSTANCES"); do
			ns=$PREFIX-l$j
			balancer "$ns" "$PREFIX-l${j}eth" "$PREFIX-l${j}sw" "$(instancemac "$j")"
			ip -n "$ns" addr replace "$(instance4 "$j")/24" dev "$PREFIX-l${j}eth"
			ip -n "$ns" addr replace "$(instance6 "$j")/64" dev "$PREFIX-l${j}eth" nodad
		done
		router
	fi

	for i in $(seq "$CLIENTS"); do
		ns=$PREFIX-c$i
		ensure_ns "$ns"
		ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.accept_redirects=0 \
			net.ipv4.conf.default.accept_redirects=0 net.ipv6.conf.all.accept_redirects=0 \
			net.ipv6.conf.default.accept_redirects=0
		veth "$ns" "$PREFIX-c${i}eth" "$PREFIX-c${i}sw" "$(clientmac "$i")" 1 "$CBR"
		ip -n "$ns" addr replace "$(client4 "$i")/24" dev "$PREFIX-c${i}eth"
		ip -n "$ns" addr replace "$(client6 "$i")/64" dev "$PREFIX-c${i}eth" nodad
		if [ "$INSTANCES" -eq 0 ]; then
			ip -n "$ns" route replace "$VIP4/32" via "$LB4C" dev "$PREFIX-c${i}eth"
			ip -n "$ns" -6 route replace "$VIP6/128" via "$LB6C" dev "$PREFIX-c${i}eth"
			ip -n "$ns" route replace 10.97.0.0/24 dev "$PREFIX-c${i}eth"
			ip -n "$ns" -6 route replace fd00:97::/64 dev "$PREFIX-c${i}eth"
		else
			ip -n "$ns" route replace default via "$R4C" dev "$PREFIX-c${i}eth"
			ip -n "$ns" -6 route replace default via "$R6C" dev "$PREFIX-c${i}eth"
		fi
	done

	for i in $(seq "$NB"); do
		ns=$PREFIX-b$i
		ensure_ns "$ns"
		ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
		veth "$ns" "$PREFIX-b${i}eth" "$PREFIX-b${i}sw" "$(backendmac "$i")" 1
		ip -n "$ns" addr replace "$(backend4 "$i")/24" dev "$PREFIX-b${i}eth"
		ip -n "$ns" addr replace "$(backend6 "$i")/64" dev "$PREFIX-b${i}eth" nodad
		ip -n "$ns" addr replace "$VIP4/32" dev lo
		ip -n "$ns" addr replace "$VIP6/128" dev lo nodad
		if [ "$INSTANCES" -eq 0 ]; then
			ip -n "$ns" route replace 10.98.0.0/24 dev "$PREFIX-b${i}eth"
			ip -n "$ns" -6 route replace fd00:98::/64 dev "$PREFIX-b${i}eth"
		else
			ip -n "$ns" route replace 10.98.0.0/24 via "$R4B" dev "$PREFIX-b${i}eth"
			ip -n "$ns" -6 route replace fd00:98::/64 via "$R6B" dev "$PREFIX-b${i}eth"
		fi
	done

	bin=$(testserver_bin)
	for i in $(seq "$CLIENTS"); do
		ip netns exec "$PREFIX-c$i" "$bin" offload-off "$PREFIX-c${i}eth"
	done
	if [ "$INSTANCES" -eq 0 ]; then
		ip netns exec "$SW" "$bin" offload-off "$PREFIX-lbsw"
	else
		for j in $(seq "$INSTANCES"); do
			ip netns exec "$SW" "$bin" offload-off "$PREFIX-l${j}sw"
		done
	fi
	if [ "$SERVERS" = 1 ]; then
		for i in $(seq "$NB"); do
			# The weight a server starts with; a running one keeps its own.
			if ! alive "$RUN/b$i.pid"; then
				if [ -n "$WEIGHTS" ]; then
					echo "${WEIGHT[$((i - 1))]}" >"$RUN/b$i.weight"
				else
					rm -f "$RUN/b$i.weight"
				fi
			fi
			start_server "$i" "$bin"
		done
	fi
	if [ "$INSTANCES" -eq 0 ]; then
		echo "$PROG: up: prefix $PREFIX, clients $CLIENTS, backends $BACKENDS + failover $FAILOVER," \
			"balancer interface $PREFIX-lbeth in $LB ($QUEUES queues), VIPs $VIP4 $VIP6"
	else
		echo "$PROG: up: prefix $PREFIX, clients $CLIENTS, backends $BACKENDS + failover $FAILOVER," \
			"router $PREFIX-r (BIRD, AS 65000), instances $PREFIX-l1..$PREFIX-l$INSTANCES (AS 65010, $QUEUES queues), VIPs $VIP4 $VIP6"
	fi
}

# --- start-server ----------------------------------------------------------------
start-server() {
	[[ "$BACKEND" =~ ^[1-9][0-9]?$ ]] || die "start-server: --backend must be a backend number (1 for b1, ...); got '$BACKEND'"
	nsexists "$PREFIX-b$BACKEND" || die "start-server: no namespace $PREFIX-b$BACKEND (is the bed up?)"
	mkdir -p "$RUN"
	start_server "$BACKEND" "$(testserver_bin)"
	echo "$PROG: start-server: b$BACKEND pid $(cat "$RUN/b$BACKEND.pid")"
}

# --- down --------------------------------------------------------------------
down() {
	local f ns pids link
	# Servers first: a namespace whose name is gone lives on while a
	# process is inside it.
	pids=()
	for f in "$RUN"/b[0-9]*.pid; do
		[ -e "$f" ] || continue
		alive "$f" && pids+=("$(cat "$f")")
	done
	alive_bird && pids+=("$(cat "$RUN/bird.pid")")
	stop "${pids[@]}"
	for ns in $(ourns); do
		# shellcheck disable=SC2046
		stop $(ip netns pids "$ns" 2>/dev/null)
		ip netns del "$ns" 2>/dev/null || true
	done
	# Nothing is made outside the namespaces, but a half-made link may be.
	for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$PREFIX-" || true); do
		ip link del "$link" 2>/dev/null || true
	done
	rm -rf "$RUN"
	[ -z "$(ourns)" ] || die "down: namespaces left: $(ourns | tr '\n' ' ')"
	echo "$PROG: down: prefix $PREFIX"
}

# --- status ------------------------------------------------------------------
status() {
	local ns f
	if [ -z "$(ourns)" ]; then
		echo "$PROG: no test bed with prefix $PREFIX"
		return 0
	fi
	for ns in $(ourns); do
		echo "== $ns"
		ip -n "$ns" -br addr show | grep -v '^lo .*DOWN' | sed 's/^/   /'
		{ ip -n "$ns" -4 route show; ip -n "$ns" -6 route show; } |
			grep -v -e 'proto kernel' -e '^fe80::/64' -e '^multicast' | sed 's/^/   route /' || true
	done
	if alive_bird; then
		echo "== router (birdc -s $RUN/bird.ctl)"
		ip netns exec "$PREFIX-r" birdc -s "$RUN/bird.ctl" show protocols | sed 's/^/   /' || true
	fi
	for f in "$RUN"/b[0-9]*.pid; do
		[ -e "$f" ] || continue
		if alive "$f"; then
			echo "server $(basename "$f" .pid): pid $(cat "$f")"
		else
			echo "server $(basename "$f" .pid): not running"
		fi
	done
}

"$CMD"
