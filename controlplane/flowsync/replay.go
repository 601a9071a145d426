package flowsync

// Replay protection: per sender ID, a sliding window over sequence
// numbers (as IPsec's, RFC 4303 §3.4.3): a sequence number at most
// windowSize below the highest seen is accepted once; below that, stale.
// A restarted peer has a new sender ID, hence a new window.
const (
	windowSize = 1024
	// maxClockSkewMs: a message whose sender clock is further from ours
	// is stale (also bounds how long a captured one could be replayed to
	// a receiver that forgot its sender: see maxSenders).
	maxClockSkewMs = 30_000
	// maxSenders bounds the windows kept; the one heard least recently
	// goes first. A window exists only for a sender whose message
	// authenticated.
	maxSenders = 1024
)

// window is one sender's replay window.
type window struct {
	top  uint64 // highest sequence number accepted; 0: none yet
	bits [windowSize / 64]uint64
}

// check says whether seq may be accepted, without recording it.
func (w *window) check(seq uint64) reason {
	switch {
	case seq == 0:
		return reasonStale // numbers start at 1
	case seq > w.top:
		return reasonNone
	case w.top-seq >= windowSize:
		return reasonStale
	case w.bits[seq/64%(windowSize/64)]&(1<<(seq%64)) != 0:
		return reasonRepeat
	}
	return reasonNone
}

// accept records seq (check said yes).
func (w *window) accept(seq uint64) {
	if seq > w.top {
		if seq-w.top >= windowSize {
			w.bits = [windowSize / 64]uint64{}
		} else {
			for s := w.top + 1; s <= seq; s++ {
				w.bits[s/64%(windowSize/64)] &^= 1 << (s % 64)
			}
		}
		w.top = seq
	}
	w.bits[seq/64%(windowSize/64)] |= 1 << (seq % 64)
}

type senderState struct {
	win   window
	heard int64 // our wall clock, ms
}

// senders are the windows of the senders heard; one goroutine only (the
// receive loop).
type senders struct {
	m map[uint64]*senderState
}

// check is the replay verdict on an authenticated message of sender at
// seq sent at wall clock sent, received at now (both unix ms); when it is
// accepted, it is recorded.
func (s *senders) check(sender, seq uint64, sent, now int64) reason {
	if d := now - sent; d > maxClockSkewMs || d < -maxClockSkewMs {
		return reasonStale
	}
	st := s.m[sender]
	if st == nil {
		if s.m == nil {
			s.m = map[uint64]*senderState{}
		}
		if len(s.m) >= maxSenders {
			s.evict()
		}
		st = &senderState{}
		s.m[sender] = st
	}
	if r := st.win.check(seq); r != reasonNone {
		return r
	}
	st.win.accept(seq)
	st.heard = now
	return reasonNone
}

func (s *senders) evict() {
	var old uint64
	first := true
	var at int64
	for id, st := range s.m {
		if first || st.heard < at {
			old, at, first = id, st.heard, false
		}
	}
	delete(s.m, old)
}
