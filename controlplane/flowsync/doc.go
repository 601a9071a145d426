// Package flowsync shares an instance's tracked flows with its peers
// ([flow_sync]), so that a flow the routers move to another
// instance finds its entry there, with the same backend, even where
// Maglev would now choose another.
//
// What is shared: each conntrack entry that becomes established and this
// instance's own (the deciders push it on their SyncRings: a half-open
// entry confirmed, a peer entry hit, an established entry replaced), as a
// record: the flow key without the local service ID, the backend's fleet
// ID (dataplane.FleetID: service name and address, the same on every
// instance), the side and the age since the flow's last packet. Half-open
// entries are never sent (a SYN flood makes no sync traffic), nor entries
// that came from a peer. A walk of the table (RangeBuckets, a slice per
// tick) sends again, once per refresh period (a third of the shortest idle
// timeout, within [1 s, 60 s]), every own established entry used since
// the previous pass began, so a peer's copy of a live flow never expires
// first. A token bucket bounds the records sent per second
// (max_records_per_sec, ring records first); each record goes to every
// peer. Every peer hears a datagram at least once a second (a heartbeat
// when there is nothing to send): that is what "up" and "last heard" are.
//
// A receiver translates the fleet ID to its own backend and service (a
// map rebuilt when the snapshot changes; unknown: counted, dropped) and
// merges the record (conntrack.Table.Merge: stored where it has no live
// entry, refreshes one for the same backend, keeps one for another backend
// and counts a conflict).
//
// Wire (wire.go has the byte table): UDP datagrams of at most 1400 bytes,
// a clear header (magic, version, kind, key ID, sender ID, sequence
// number, sender's wall clock) authenticated as associated data, and a
// body of records sealed with AES-256-GCM under a key derived per sender
// (HKDF-SHA256 of the key and the sender ID), the nonce being the
// sequence number. The key file has one or two keys: the first seals,
// both open (a rollover). Refused and counted by reason, never applied:
// not from a configured peer (peer), unknown version (version), cut short
// or ill-formed (malformed), no key with its ID or it does not open (key),
// a sequence number seen before (repeat, a 1024-wide window per sender)
// or below the window, or a sender clock more than 30 s from ours (stale).
//
// A datagram's source must be a configured peer exactly (address and
// port: a Syncer sends from its Listen socket); a pull's source address
// must be a peer's (its port is the puller's own; the puller dials from
// its Listen address where that is not unspecified).
//
// Pull (pull.go): a starting instance with no kept table fetches every
// live established entry (own and peer) of one peer over TCP, on the same
// port, with the same keys, and first the backends that peer still drains
// (M5), which it adopts as draining so that their records resolve
// (Options.AdoptDraining): its request carries a fresh random nonce and
// its wall clock; each response frame is sealed with the nonce in its
// associated data (no frame of another pull can be passed off as one of
// this), and an end frame carries the count. A peer serves at most two
// pulls at a time.
package flowsync
