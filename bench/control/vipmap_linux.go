package control

import (
	"fmt"

	"xlb/dataplane/xdpprog"
)

// openVIPMap loads the XDP program's objects, as `xlb run` does, for their
// VIP map: a reload then writes the kernel's BPF hash map, key by key, as
// SIGHUP does. Without the privileges to create BPF objects it returns the
// reason, and the caller uses a stand-in.
func openVIPMap() (vipSetter, func(), string, error) {
	o, err := xdpprog.Load(1)
	if err != nil {
		return nil, nil, "", fmt.Errorf("loading the XDP program's maps: %w", err)
	}
	return o, func() { _ = o.Close() }, fmt.Sprintf("xdpprog's BPF hash map (%d keys at most)", xdpprog.MaxVIPs), nil
}
