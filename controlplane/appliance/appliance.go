package appliance

import (
	"errors"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/dataplane"
)

// ErrNotRunning is what Reload, Drain and Undrain return before Run has
// started the appliance, or after it stopped.
var ErrNotRunning = errors.New("appliance: not running")

// initialWeight is every backend's weight until it reports one: 0, as for
// a backend whose probes were never answered (W1a). While every backend of
// a weighted service has it, they share equally (W1b).
const initialWeight = 0

// Appliance is one xlb forwarding traffic on one interface: New prepares
// it, Run brings it up, serves and takes it down. Status, Reload, Drain
// and Undrain may be called from any goroutine while it runs.
type Appliance struct {
	cfg    *config.Config
	log    *zap.Logger
	health *admin.HealthMetrics
	ready  chan struct{}
	// checked is the first health round (nil until Run makes it).
	checked atomic.Pointer[firstRound]
	cur     atomic.Pointer[running]
	// keepPrivileges: Run keeps every capability it was started with.
	keepPrivileges bool
	// reloadBegin and reloadEnd bracket every reload applied (OnReload).
	reloadBegin, reloadEnd func()
}

var _ admin.Source = (*Appliance)(nil)

// running is what a started appliance serves from: set by Run once
// everything is up, before the admin listener starts.
type running struct {
	cp      *controlplane.ControlPlane
	engine  *dataplane.Engine // its conntrack table: the one in use now
	workers []admin.QueueStats
	now     func() int64
	runtime func() *admin.Runtime
	rl      *reloader
	ann     *announcer // nil without [bgp]
	capture *capturer
	rounds  func() []WorkerRounds
	// flowSync is the [flow_sync] part of the status (nil without it).
	flowSync func() *admin.FlowSyncReport
}

// New prepares an appliance for cfg, which must be valid for xlb run
// (config.Config.ValidateForRun). It touches nothing on the host: Run
// does. log nil logs nothing.
func New(cfg *config.Config, log *zap.Logger) (*Appliance, error) {
	if cfg == nil {
		return nil, errors.New("appliance: no configuration")
	}
	if err := cfg.ValidateForRun(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Appliance{cfg: cfg, log: log, health: admin.NewHealthMetrics(), ready: make(chan struct{})}, nil
}

// KeepPrivileges makes Run keep every capability it was started with
// instead of dropping all but those it needs once started (`xlb run
// --keep-privileges`): for a host where they cannot be dropped. Call it
// before Run.
func (a *Appliance) KeepPrivileges() { a.keepPrivileges = true }

// OnReload has every reload the appliance is asked to apply, however it
// came (SIGHUP's ReloadFile, the admin socket's `xlb reload`), call begin
// before it reads the file and end once it is applied or refused; a dry
// run calls neither. `xlb run` tells systemd RELOADING=1 and READY=1 with
// them. Call it before Run.
func (a *Appliance) OnReload(begin, end func()) { a.reloadBegin, a.reloadEnd = begin, end }

// Ready is closed once the XDP program is attached, every queue's worker
// runs and the admin listener serves: from then on the appliance forwards
// what reaches it, and Reload applies.
func (a *Appliance) Ready() <-chan struct{} { return a.ready }

// HealthChecked is closed once every health-check target of the starting
// configuration has its first result applied (at once when there is none),
// so that eligible sets follow health checks rather than the initial
// state. It returns nil before Run has set up the health checks; a caller
// waits on Ready first. With Ready, it is the point from which the VIPs
// may be announced.
func (a *Appliance) HealthChecked() <-chan struct{} {
	if r := a.checked.Load(); r != nil {
		return r.done
	}
	return nil
}

// Status is the appliance's state at this instant, what /status serves
// (services, backends, conntrack, queues, reloads and the runtime: XDP
// and sockets, health-check targets). Before Run is up it is empty.
func (a *Appliance) Status() *admin.Report {
	r := a.cur.Load()
	if r == nil {
		return admin.Gather(admin.Inputs{})
	}
	in := admin.Inputs{Snapshot: r.cp.Snapshot(), Workers: r.workers, Now: r.now(),
		Switches: r.cp.FailoverSwitches(), Reloads: r.rl.report(), Runtime: r.runtime()}
	if r.engine != nil {
		in.Conntrack, in.ConntrackFaults = r.engine.Conntrack(), r.engine.ConntrackFaults()
	}
	if r.ann != nil {
		in.BGP = &admin.BGPReport{Status: r.ann.sp.Status(), NodeDrained: r.ann.nodeDown.Load()}
	}
	if r.flowSync != nil {
		in.FlowSync = r.flowSync()
	}
	return admin.Gather(in)
}

// ErrNoBGP is what DrainNode and UndrainNode return without [bgp]: the
// instance announces nothing, so there is nothing to withdraw.
var ErrNoBGP = errors.New("no [bgp] section: this instance announces no routes")

// DrainNode withdraws every VIP's route (after the GRACEFUL_SHUTDOWN
// community for a moment) while the instance keeps forwarding: the
// routers move its flows to the other instances, which pick the same
// backends (S5), so none breaks; maintenance can follow. drained false
// announces them again (where the announcement rule allows).
func (a *Appliance) DrainNode(drained bool) error {
	r := a.cur.Load()
	if r == nil {
		return ErrNotRunning
	}
	if r.ann == nil {
		return ErrNoBGP
	}
	r.ann.setDrained(drained)
	return nil
}

// Drain takes a backend out of service: no new connections, its tracked
// ones drain (M5). name is an endpoint's name or address (in every
// service that has it) or SERVICE/NAME; the backends drained come back as
// "service/name". A name that is no current backend is
// admin.ErrUnknownBackend.
func (a *Appliance) Drain(name string) ([]string, error) {
	r := a.cur.Load()
	if r == nil {
		return nil, ErrNotRunning
	}
	hit, err := r.cp.Drain(name, r.now())
	return hit, opErr(name, err)
}

// Undrain returns a drained backend to service; name as for Drain.
func (a *Appliance) Undrain(name string) ([]string, error) {
	r := a.cur.Load()
	if r == nil {
		return nil, ErrNotRunning
	}
	hit, err := r.cp.Undrain(name, r.now())
	return hit, opErr(name, err)
}

func opErr(name string, err error) error {
	if errors.Is(err, controlplane.ErrUnknownBackend) {
		return fmt.Errorf("%w %q: no current endpoint has this name or address", admin.ErrUnknownBackend, name)
	}
	return err
}

// Reload applies cfg as one step (X2): see ReloadFile. An invalid cfg, or
// one that changes [dataplane] or [admin] (ErrRestart), changes nothing
// and counts as a failed reload.
func (a *Appliance) Reload(cfg *config.Config) error {
	r := a.cur.Load()
	if r == nil {
		return ErrNotRunning
	}
	if cfg == nil {
		return errors.New("appliance: no configuration")
	}
	return r.rl.reload(cfg.Path, func() (*config.Config, error) { return cfg, nil })
}

// ReloadFile reads the file of the running configuration again and
// applies it (the SIGHUP path, X2): VIPs added to the XDP program first,
// neighbours, health checks, the control plane (unchanged backends keep
// their flows, removed ones drain per M5), then stale VIPs removed. A file
// that does not load or validate, or that changes [dataplane] or [admin],
// changes nothing and counts as a failed reload; either way the outcome is
// logged and shown in Status. So does a file without any forwarding rule
// while the running configuration has some (ErrEmpty): see ReloadFileWith.
func (a *Appliance) ReloadFile() error { return a.ReloadFileWith(ReloadOptions{}) }

// ReloadFileWith is ReloadFile with what an operator asked for (`xlb
// reload --allow-empty`).
func (a *Appliance) ReloadFileWith(opts ReloadOptions) error {
	r := a.cur.Load()
	if r == nil {
		return ErrNotRunning
	}
	return r.rl.reloadFile(opts)
}
