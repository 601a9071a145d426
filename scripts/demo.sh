#!/usr/bin/env bash
# demo.sh — `make demo`: xlb forwarding real kernel TCP and UDP on this
# machine. It builds bin/xlb and bin/xlb-testserver, brings up the test bed
# (scripts/testbed.sh, prefix xlbdemo: a client, the balancer, backends
# b1-b3 and failover b4 in network namespaces), runs `xlb run` with
# testdata/demo/testbed.toml on the balancer's interface (native XDP, two
# queues), waits until xlb's health checks find the primaries healthy with
# the weights they report (1:2:3), opens 1000 TCP connections and 1000 UDP
# exchanges from the client to the VIP, prints per-backend counts next to
# the shares xlb's own weights predict, shows some of /metrics and `xlb status`, and tears
# everything down on every exit path. Needs root; everything stays inside
# the namespaces.
set -euo pipefail

PROG=demo.sh
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=xlbdemo
CFG=testdata/demo/testbed.toml
N=1000
N6=300
VIP4=10.99.0.10
VIP6=fd00:99::10
LB=$PREFIX-lb
CLIENT=$PREFIX-c1
IFACE=$PREFIX-lbeth
ADMIN_PORT=9110
# What the backends report on /healthz (X-Load-Balancing-Endpoint-Weight).
WEIGHTS=1,2,3,1

die() { echo "$PROG: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] ||
	die "needs root (network namespaces, veths, XDP, AF_XDP): run it as root, e.g. sudo env \"PATH=\$PATH\" make demo"
command -v go >/dev/null || die "needs the go command (Go 1.26) in PATH to build xlb; with sudo: sudo env \"PATH=\$PATH\" make demo"
command -v ip >/dev/null || die "needs iproute2 (ip)"

cd "$ROOT"
START=$SECONDS
TMP=$(mktemp -d /tmp/xlb-demo.XXXXXX)
LOG=$TMP/xlb.log
XLB_PID=

# Every exit path: stop xlb (SIGTERM detaches XDP; the bed's teardown kills
# whatever is left in the namespaces anyway) and remove the bed.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	echo
	echo "== tearing down"
	if [ -n "$XLB_PID" ] && kill -0 "$XLB_PID" 2>/dev/null; then
		kill -TERM "$XLB_PID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$XLB_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$XLB_PID" 2>/dev/null || true
		wait "$XLB_PID" 2>/dev/null || true
		grep -o '"msg":"XDP program detached"' "$LOG" >/dev/null && echo "xlb stopped (SIGTERM), XDP program detached"
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ] && [ "$rc" -ne 143 ] && [ -s "$LOG" ]; then
		echo "xlb's log, last lines:"
		tail -n 20 "$LOG"
	fi
	scripts/testbed.sh down --prefix "$PREFIX" || rc=1
	rm -rf "$TMP"
	case $rc in
	0) echo "demo done in $((SECONDS - START))s" ;;
	130 | 143) echo "demo interrupted after $((SECONDS - START))s" ;;
	*) echo "demo FAILED after $((SECONDS - START))s" ;;
	esac
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# admin PATH: GET from xlb's admin listener, on the balancer namespace's
# loopback; bash's /dev/tcp, so no curl is needed. Prints the body.
admin() {
	http_get "$LB" 127.0.0.1 "$ADMIN_PORT" "$1" | sed '1,/^\r$/d'
}
# http_get NS HOST PORT PATH: a whole HTTP/1.0 answer, headers included.
http_get() {
	ip netns exec "$1" bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3 && cat <&3' \
		_ "$2" "$3" "$4" 2>/dev/null
}

echo "== building bin/xlb (as make build does) and bin/xlb-testserver"
make --no-print-directory build >/dev/null
go build -o bin/xlb-testserver ./cmd/xlb-testserver
bin/xlb version
export XLB_TESTSERVER=$ROOT/bin/xlb-testserver

echo
echo "== test bed: client c1, balancer lb ($IFACE, 2 queues), backends b1-b3 and failover b4"
scripts/testbed.sh down --prefix "$PREFIX" >/dev/null
scripts/testbed.sh up --prefix "$PREFIX" --weights "$WEIGHTS"

echo
echo "== xlb run -c $CFG   (in namespace $LB, log $LOG)"
ip netns exec "$LB" bin/xlb run -c "$CFG" >"$LOG" 2>&1 &
XLB_PID=$!
for i in $(seq 100); do
	kill -0 "$XLB_PID" 2>/dev/null || { cat "$LOG" >&2; die "xlb exited before serving /healthz (log above)"; }
	[ "$(admin /healthz)" = ok ] && break
	[ "$i" -lt 100 ] || { cat "$LOG" >&2; die "xlb did not serve /healthz within 10s (log above)"; }
	sleep 0.1
done
# The startup summary, from xlb's JSON log line "xlb running".
summary=$(grep '"msg":"xlb running"' "$LOG")
str() { grep -o "\"$1\":\"[^\"]*\"" <<<"$summary" | head -1 | cut -d'"' -f4; }
list() { grep -o "\"$1\":\[[^]]*\]" <<<"$summary" | head -1 | cut -d: -f2- | tr -d '"[]' | tr , ' '; }
echo "xlb is running: XDP $(str xdp_mode) on $(str interface), AF_XDP sockets (queue:bind mode) $(list bind_modes), VIPs $(list vips)"

# ready: in /metrics, every primary (b1-b3 and their -v6/-udp twins) of
# every service is healthy with the weight its server reports.
ready() {
	admin /metrics | awk -v weights="$WEIGHTS" '
		BEGIN { split(weights, w, ",") }
		/^xlb_backend_(healthy|weight)\{/ {
			be = $1; sub(".*backend=\"", "", be); sub("[-\"].*", "", be)   # b1-udp -> b1
			i = substr(be, 2) + 0
			if (i < 1 || i > 3) next
			n++
			if ($1 ~ /^xlb_backend_healthy/ ? $2 != 1 : $2 != w[i]) bad = 1
		}
		END { exit (n == 18 && !bad) ? 0 : 1 }'
}
echo
echo "== waiting for xlb's health checks (HTTP GET /healthz on :8080, every second, 2 passes to be healthy)"
t0=$SECONDS
for i in $(seq 200); do
	kill -0 "$XLB_PID" 2>/dev/null || { cat "$LOG" >&2; die "xlb exited (log above)"; }
	ready && break
	[ "$i" -lt 200 ] || die "the primaries were not healthy with weights ${WEIGHTS%,*} within 20s; /status runtime.health_checks says why"
	sleep 0.1
done
echo "b1-b3 healthy in every service, with the weights they report: ${WEIGHTS%,*} (after $((SECONDS - t0))s)"

echo
echo "== $N new TCP connections (HTTP GET /) to $VIP4:80 and $N UDP exchanges (each from a new port) with $VIP4:53, from c1"
probe_rc=0
probe=$(ip netns exec "$CLIENT" bin/xlb-testserver probe --tcp "$VIP4:80" --udp "$VIP4:53" -n "$N" --parallel 16) || probe_rc=$?
metrics=$(admin /metrics)

# predicted SERVICE: "bI share%" lines from xlb's own weights and eligible
# set in /metrics (weight / sum of eligible weights; 0 when not eligible).
predicted() {
	awk -v svc="$1" '
		function label(s, k,   r) { r = s; sub(".*" k "=\"", "", r); sub("\".*", "", r); return r }
		/^xlb_backend_(weight|eligible)\{/ && index($0, "service=\"" svc "\"") {
			be = label($1, "backend"); sub("-.*", "", be)   # b1-udp -> b1
			if ($1 ~ /^xlb_backend_weight/) w[be] = $2; else e[be] = $2
		}
		END { for (b in w) if (e[b] == 1) sum += w[b]
		      for (b in w) printf "%s %s %.1f\n", b, w[b], (e[b] == 1 && sum > 0) ? 100 * w[b] / sum : 0 }' <<<"$metrics"
}
count() { awk -v p="$1" -v b="$2" '$1 == p && $2 == b { print $3; f = 1 } END { if (!f) print 0 }' <<<"$probe"; }
total() { awk -v p="$1" '$1 == p && $2 ~ /^b[0-9]+$/ { s += $3 } END { print s + 0 }' <<<"$probe"; }
pct() { awk -v c="$1" -v t="$2" 'BEGIN { printf "%.1f", t ? 100 * c / t : 0 }'; }

tcp_total=$(total tcp) udp_total=$(total udp)
declare -A tcp_pred udp_pred weight
while read -r be w s; do tcp_pred[$be]=$s weight[$be]=$w; done < <(predicted web)
while read -r be _ s; do udp_pred[$be]=$s; done < <(predicted echo)
printf '%-14s %8s %9s   %-16s %-16s %s\n' backend "xlb's" predicted "TCP connections" "UDP exchanges" "reports on /healthz"
printf '%-14s %8s %9s\n' "" weight share
for i in 1 2 3 4; do
	be=b$i
	name=$be
	[ "$i" = 4 ] && name="$be (failover)"
	reported=$(http_get "$LB" "10.97.0.$((10 + i))" 8080 /healthz | tr -d '\r' |
		awk -F': ' 'tolower($1) == "x-load-balancing-endpoint-weight" { print "weight " $2 }')
	tc=$(count tcp "$be") uc=$(count udp "$be")
	printf '%-14s %8s %8s%%   %5s  %5s%%     %5s  %5s%%     %s\n' "$name" "${weight[$be]:-?}" "${tcp_pred[$be]:-?}" \
		"$tc" "$(pct "$tc" "$tcp_total")" "$uc" "$(pct "$uc" "$udp_total")" "${reported:-none}"
done
printf '%-14s %8s %9s   %5s %-9s %5s\n' errors "" "" "$(count tcp errors)" "" "$(count udp errors)"
echo "xlb's health checks read each backend's weight from /healthz; WEIGHTED_MAGLEV gives each primary"
echo "new connections in proportion to it. The failover backend b4 takes nothing while the primaries"
echo "are healthy (failover_ratio 0)."

echo
echo "== $N6 new TCP connections to [$VIP6]:80 (IPv6), from c1"
probe6=$(ip netns exec "$CLIENT" bin/xlb-testserver probe --tcp "[$VIP6]:80" -n "$N6" --parallel 16) || probe_rc=$?
awk '$2 ~ /^b[0-9]+$/ { printf "%s%s %s", sep, $2, $3; sep = ", " } $2 == "errors" { printf "; errors %s\n", $3 }' <<<"$probe6"

echo
echo "== from /metrics (http://127.0.0.1:$ADMIN_PORT/metrics in $LB)"
metrics=$(admin /metrics)
grep -E '^xlb_queue_(rx|tx)_packets_total|^xlb_conntrack_(entries|capacity) |^xlb_service_forwarded_packets_total|^xlb_backend_new_connections_total\{backend="b[0-9]",' <<<"$metrics"

echo
echo "== xlb status (in $LB): the running appliance's services and backends"
ip netns exec "$LB" bin/xlb status --admin "127.0.0.1:$ADMIN_PORT" || die "xlb status failed"

if [ "$probe_rc" -ne 0 ]; then
	echo
	echo "$probe" "$probe6" | grep 'first error' >&2 || true
	die "some connections or exchanges failed"
fi
