package appliance

// WorkerRounds is one worker's heartbeat: how many rounds its loop has
// made (worker.Worker.Rounds).
type WorkerRounds struct {
	Queue  int
	Rounds uint64
}

// WorkerRounds reads every worker's heartbeat now, in queue order; nil
// before Run is up. A caller that reads it twice, further apart than a
// worker's longest idle sleep (worker.MaxIdleWait), knows a worker whose
// count did not move is stuck.
func (a *Appliance) WorkerRounds() []WorkerRounds {
	r := a.cur.Load()
	if r == nil || r.rounds == nil {
		return nil
	}
	return r.rounds()
}
