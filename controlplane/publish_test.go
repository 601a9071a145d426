package controlplane_test

import (
	"testing"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
)

// TestPublish_L3DefaultLast: the snapshot lists a VIP's protocol rules
// before its L3_DEFAULT rule (FR2), in file order otherwise, whatever the
// file's order.
func TestPublish_L3DefaultLast(t *testing.T) {
	src := cptest.Testdata(t, "publish_l3default.toml")
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

// TestPublish_MTUFollowed: an MTU change (SetMTU, from the appliance's
// link watch) publishes a snapshot with the new MTU and frame bound, which
// decide what an encapsulation makes too big (X1); the same values again
// publish nothing.
func TestPublish_MTUFollowed(t *testing.T) {
	src := cptest.Testdata(t, "publish_mtu.toml")
	cfg, err := config.Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(cfg, nil, controlplane.Options{Local: dataplane.Local{MTU: 1500, MaxFrame: 1518}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	gen := cp.Snapshot().Gen
	if !cp.SetMTU(1400, 1418, 1000) {
		t.Fatal("SetMTU with a new MTU reported no change")
	}
	if s := cp.Snapshot(); s.Local.MTU != 1400 || s.Local.MaxFrame != 1418 || s.Gen == gen {
		t.Fatalf("snapshot after SetMTU: MTU %d, max frame %d, generation %d (was %d); want 1400, 1418, a new one", s.Local.MTU, s.Local.MaxFrame, s.Gen, gen)
	}
	gen = cp.Snapshot().Gen
	if cp.SetMTU(1400, 1418, 2000) || cp.Snapshot().Gen != gen {
		t.Error("SetMTU with the same MTU published a snapshot")
	}
}
