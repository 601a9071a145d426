package main

import (
	"errors"
	"fmt"

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
	reloads func() admin.ReloadReport
	health  *admin.HealthMetrics
}

var (
	_ admin.Sources  = (*runSources)(nil)
	_ admin.Operator = (*runSources)(nil)
	_ admin.Reloads  = (*runSources)(nil)
	_ admin.Health   = (*runSources)(nil)
	_ admin.Switches = (*runSources)(nil)
)

func (s *runSources) HealthMetrics() *admin.HealthMetrics { return s.health }
func (s *runSources) FailoverSwitches() map[string][2]uint64 {
	return s.cp.FailoverSwitches()
}

// Drain and Undrain are the operator's (POST /drain, /undrain), on the
// data plane's clock.
func (s *runSources) Drain(name string) error   { return opErr(name, s.cp.Drain(name, s.now())) }
func (s *runSources) Undrain(name string) error { return opErr(name, s.cp.Undrain(name, s.now())) }

func opErr(name string, err error) error {
	if errors.Is(err, controlplane.ErrUnknownBackend) {
		return fmt.Errorf("%w %q: no current endpoint has this name or address", admin.ErrUnknownBackend, name)
	}
	return err
}

func (s *runSources) Reloads() admin.ReloadReport {
	if s.reloads == nil {
		return admin.ReloadReport{}
	}
	return s.reloads()
}

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
