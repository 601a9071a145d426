#!/usr/bin/env bash
# make demo-sim: replays testdata/demo/scenario.jsonl through the real
# engine with `xlb sim` and prints what happened. No privileges needed (make
# demo, scripts/demo.sh, shows real traffic and needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=testdata/demo/xlb.toml
scn=testdata/demo/scenario.jsonl
echo "== xlb check"
./bin/xlb check -c "$cfg"
echo
# The figures below are the scenario's: TestDemoSimScenario (cmd/xlb)
# replays it and checks each of them.
echo "== xlb sim: 1000 new TCP connections while b1:b2:b3 report weights 100:200:300,"
echo "   then b1 and b2 fail: tracked connections stay, 100 new ones fail over to b4."
echo "   Of all 1100 new connections the weights predict b1 15.2%, b2 30.3%, b3 45.5%"
echo "   (a sixth, a third and a half of the first 1000), and b4 9.1% (the last 100)."
./bin/xlb sim --summary -c "$cfg" "$scn"
echo
echo "== xlb explain: a new connection after the failover"
./bin/xlb explain -c "$cfg" --src 192.0.2.150 --dst 203.0.113.10 --proto tcp --sport 40000 --dport 443 --flags S --unhealthy b1,b2
