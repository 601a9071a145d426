package main

import (
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/dataplane"
)

// runSources is what the admin listener of `xlb run` reads: the control
// plane's snapshot, the workers' counters, the shared conntrack table, the
// data plane's clock and run-time information.
type runSources struct {
	cp      *controlplane.ControlPlane
	ct      *conntrack.Table
	workers []admin.QueueStats
	now     func() int64
	info    func() map[string]any
}

var _ admin.Sources = (*runSources)(nil)

func (s *runSources) Snapshot() *dataplane.Snapshot { return s.cp.Snapshot() }
func (s *runSources) Workers() []admin.QueueStats   { return s.workers }
func (s *runSources) Conntrack() *conntrack.Table   { return s.ct }
func (s *runSources) Now() int64                    { return s.now() }

func (s *runSources) Info() map[string]any {
	if s.info == nil {
		return nil
	}
	return s.info()
}
