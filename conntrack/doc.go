// Package conntrack is the connection-tracking table shared by all workers:
// lock-free lookups, a writer lock per bucket, exact keys (SPEC T3), fixed
// capacity (X3) and lazy expiry (M1).
//
// # Layout
//
// The table is one fixed array of buckets (a power of two of them). A key
// has two, from disjoint bits of a seeded 64-bit hash of the 40-byte Key:
// the low bits pick its first bucket, bits 29 and up its second (the
// first's neighbour where both pick the same); bits 61..63 pick its home
// slot in the first, bits 54..56 in the second. A
// bucket is 512 bytes and holds eight entries, each one cache line:
//
//	+-------------------------------------------------------------+
//	| slot 0: header | key w0..w4 | value | lastUse   (8 words)    | line 0
//	| slot 1 ...                                                  | line 1
//	| slot 7 ...                                                  | line 7
//	+-------------------------------------------------------------+
//
//	header: seq:32 | 0:22 | spill:1 | alt:1 | reach:3 | home:3 | used:1 | lock:1
//
// used, home and alt say whose key a slot holds: a key of that home slot,
// stored in its first bucket (alt 0) or in its second (alt 1). reach and
// spill belong to the slot as a home: reach is the farthest probe any key
// of that home is at in this bucket; spill says a key of that home was
// once stored in its second bucket (it stays set). lock is the bucket's
// writer lock, in slot 0's header only.
//
// A key goes into the first free slot of the probe order home, home^1,
// home^2, ... home^7 (the first two share a 128-byte block) of its first
// bucket; that bucket full, into its second, and its home's spill bit is
// set in the first. At half load three keys in four sit in their home
// slot, nearly nine in ten within its 128-byte block (0.75 and 0.89 on
// this layout, TestLocality_HalfLoad), so most lookups read one line, where a separate line of fingerprints would make every lookup
// read two or three.
//
// Memory: 64 bytes per entry (512-byte bucket / 8 entries), plus a few KiB of
// counters for the whole table. New takes MinCapacity (1024) to MaxCapacity
// (2^28) entries and rounds the capacity up to a power of two of buckets.
// A table of 4 MiB or more is its own mapping, advised to use transparent
// huge pages and then populated: New faults every page in
// (MADV_POPULATE_WRITE, or a write per page), so that no worker pays a
// first-touch fault, a 2 MiB page zeroed, in its packet loop. Lock keeps
// it resident (mlock). Memory says how it went.
//
// Open keeps the table in a file instead, on a memory-backed file system,
// mapped shared: a header (magic, layout version, slot geometry, clock,
// bucket count, seed, boot ID, a table ID, a checksum), then the buckets as
// above. The next process that opens the file with the same geometry on
// the same boot takes the table over, entries, seed and all: a killed
// process leaves every entry it stored, but for slots it was inside
// (odd sequence), which Open clears, as it clears slots whose key could
// not be where they are (damage: the checksum covers the header only).
// A file of the same boot whose layout this binary reads but whose layout
// version, geometry or bucket count differs (another binary, another
// capacity) is migrated: read with plain reads as its header describes
// it, every live entry re-inserted into a new file of this binary's
// layout, which keeps the old table's ID and replaces the old file by
// rename. Any other file is moved aside and a new one made. Last-use
// times must be on a clock shared by processes (CLOCK_MONOTONIC).
//
// The mapping is the file: one truncated under the process makes every
// access past its new end a memory fault (SIGBUS), which kills a Go
// program. A goroutine that runs with debug.SetPanicOnFault(true) gets a
// panic instead, and FaultAt tells one inside the table's own mapping
// from any other (which must still crash); Guard runs a call so and
// returns ErrFault. Open's own walks of the file run under Guard; the
// workers contain faults in their loop (dataplane.Decider.Contain), where
// the engine replaces the table by an empty one in anonymous memory.
//
// The build tag xlb_ct_layout_alt selects a test-only geometry that never
// ships: four slots per bucket, file layout 0x7e570002 (layout.go,
// layout_alt.go). Each build reads both layouts, so tests can replace a
// binary by one of another layout and back.
//
// A lookup reads its home slot in its first bucket and, while the home's
// reach says so, the next slots of the probe order; it compares all five
// key words of each slot whose occupant has the same home and bucket, so
// two flows never share an entry however their hashes collide (T3). Only
// when the key is not there and its home's spill bit is set does it read
// its home in the second bucket the same way. The value word packs the
// backend reference, the side, the idle timeout and two marks: half-open
// (bit 63) and peer (bit 62: stored from another instance's record,
// [flow_sync]; an always-zero idle bit before, so older files read alike).
// lastUse is the caller's clock in milliseconds.
//
// # Concurrency
//
// Every shared word is a sync/atomic value. Each slot header carries a
// sequence number (a seqlock): a writer makes it odd, writes the slot, then
// makes it even again with the new key's home. A reader loads the header,
// the slot words and the header again, and retries only if the header
// changed; it never takes a lock and only ever waits for the few stores of
// a write to the very slot it wants. A writer takes the lock bit in slot
// 0's header of the key's first bucket (one CAS); unless the key is found
// there, or is new and fits there with its home never spilled, it then
// takes the locks of both of the key's buckets, lower index first.
// Writers of other buckets share nothing. A writer fills a free or
// reclaimed slot, and adjusts a home's reach (a header store that leaves
// the sequence alone) after placing or removing a key of that home. A key
// moves only to make room in a full bucket pair: to its other bucket,
// written there before it is cleared here, so that a reader finds it at
// one place or the other (makeRoom; a lookup that misses in the second
// bucket probes the first again). makeRoom only try-locks the bucket it
// moves a key to: it never waits there.
// Touch stores lastUse alone, outside the seqlock: it is one word, and a
// stale touch of a reused slot merely refreshes another entry.
//
// # Expiry and capacity (M1, X3)
//
// An entry idle for IdleSec seconds or more (now - lastUse >= IdleSec*1000)
// is treated as absent by Lookup and Range; nothing scans for it. Its slot is
// reclaimed when a later Upsert lands in the same bucket. A new key goes
// into a free or expired slot of its first bucket, else of its second
// (expired ones counted as reclaimed); when both are full of live
// entries, Upsert evicts a half-open entry of the pair, else moves a key
// of the pair to its own other bucket where that has room (counted as a
// move), else evicts the least recently used entry of the pair
// (evictions counted); after a search for a key to move finds none, only
// one full pair in four searches until one succeeds again. A half-open
// key never evicts an established entry: with only those left it is not
// stored (Refused). The table never grows. Measured with live (unexpired)
// keys filled into an empty 1M table (BenchmarkFill; commit f85ed10, the
// 2-core development VM): no insert displaced a live entry up to 50 % of
// Capacity, 0.08 % of those from 50 to 90 %, 25 % of those from 90 to
// 100 %. Size the capacity at about 1.2 times the expected number of
// concurrent flows to keep evictions rare.
//
// Merge stores a peer's record of a flow, marked peer, where the table has
// no live entry for its key, or a half-open one for another backend; a live
// entry of the record's backend only has its last use raised (a half-open
// one confirmed). A record may take a free or expired slot, else displace
// a half-open entry, else move a key of the pair to its other bucket, else
// displace the least recently used peer entry of the pair; never an
// established entry of this instance's own, so a peer's flows cannot push
// out the flows this instance serves (MergeRefused).
//
// The hash is seeded from crypto/rand at New (and at Open for a new
// file), so bucket placement is not predictable from outside (hash
// flooding) and differs between tables.
package conntrack
