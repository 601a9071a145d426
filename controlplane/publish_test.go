package controlplane_test

import (
	"testing"

	"xlb/config"
	"xlb/controlplane"
)

// TestPublish_L3DefaultLast: the snapshot lists a VIP's protocol rules
// before its L3_DEFAULT rule (FR2), in file order otherwise, whatever the
// file's order.
func TestPublish_L3DefaultLast(t *testing.T) {
	const src = `
[[health_check]]
name = "hc"
type = "TCP"
[[backend_service]]
name = "any"
protocol = "UNSPECIFIED"
health_checks = ["hc"]
[[backend_service.backend]]
group = "a"
endpoints = [{ ip = "10.0.0.1" }]
[[backend_service]]
name = "web"
health_checks = ["hc"]
[[backend_service.backend]]
group = "a"
endpoints = [{ ip = "10.0.0.2" }]
[[backend_service]]
name = "dns"
protocol = "UDP"
health_checks = ["hc"]
[[backend_service.backend]]
group = "a"
endpoints = [{ ip = "10.0.0.3" }]
[[forwarding_rule]]
name = "l3"
ip_address = "192.0.2.1"
ip_protocol = "L3_DEFAULT"
all_ports = true
backend_service = "any"
[[forwarding_rule]]
name = "tcp"
ip_address = "192.0.2.1"
ip_protocol = "TCP"
ports = ["80"]
backend_service = "web"
[[forwarding_rule]]
name = "other"
ip_address = "192.0.2.2"
ip_protocol = "TCP"
ports = ["80"]
backend_service = "web"
[[forwarding_rule]]
name = "udp"
ip_address = "192.0.2.1"
ip_protocol = "UDP"
ports = ["53"]
backend_service = "dns"
`
	cfg, err := config.Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(cfg, nil, controlplane.Options{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	snap := cp.Snapshot()
	if len(snap.Rules) != 2 || snap.Rules[0].VIP.String() != "192.0.2.1" || snap.Rules[1].VIP.String() != "192.0.2.2" {
		t.Fatalf("VIPs: %+v", snap.Rules)
	}
	var names []string
	for _, r := range snap.Rules[0].Rules {
		names = append(names, r.Name)
	}
	if len(names) != 3 || names[0] != "tcp" || names[1] != "udp" || names[2] != "l3" {
		t.Errorf("rules of 192.0.2.1: %v, want [tcp udp l3]", names)
	}
}
