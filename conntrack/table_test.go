package conntrack

import (
	"math/rand/v2"
	"testing"
)

// TestT3_ExactKeysUnderCollision puts keys that differ in a single field
// into one bucket where all keys have the same home slot: each lookup must
// still find its own entry and never another flow's.
func TestT3_ExactKeysUnderCollision(t *testing.T) {
	tab := oneBucket(t)
	base := key5(1)
	variants := []func(k *Key){
		func(k *Key) {},
		func(k *Key) { k.SrcPort++ },
		func(k *Key) { k.DstPort++ },
		func(k *Key) { k.Proto = 17 },
		func(k *Key) { k.Src[15] ^= 1 },
		func(k *Key) { k.Dst[0] = 0x20 }, // an IPv6 destination
		func(k *Key) { k.Service = 2 },
		func(k *Key) { k.Kind = Kind3T; k.SrcPort, k.DstPort = 0, 0 },
	}
	variants = variants[:min(len(variants), slotsPerBucket)] // a bucket's worth
	keys := make([]Key, len(variants))
	for i, f := range variants {
		keys[i] = base
		f(&keys[i])
		if r := tab.Upsert(&keys[i], val(i), 0); r != Inserted {
			t.Fatalf("Upsert variant %d = %v, want inserted", i, r)
		}
	}
	for i, k := range keys {
		if e := mustFind(t, tab, k, 1); e.Backend != uint32(i) {
			t.Errorf("variant %d: backend %d, want %d", i, e.Backend, i)
		}
	}
	// Same bucket, same home, not stored: a miss, not a neighbour.
	k2 := base
	k2.Kind, k2.SrcPort, k2.DstPort, k2.Proto = Kind2T, 0, 0, 0
	mustMiss(t, tab, k2, 1)
	if tab.Delete(&k2) {
		t.Error("Delete of an absent colliding key removed something")
	}
	if tab.Len() != len(keys) {
		t.Errorf("Len = %d, want %d", tab.Len(), len(keys))
	}
}

// TestT3_ExactKeysSeededTable checks the same with the real hash: keys one
// bit apart are distinct entries.
func TestT3_ExactKeysSeededTable(t *testing.T) {
	tab := mustNew(t, 1024)
	a, b := key5(7), key5(7)
	b.Src[15] ^= 0x80
	tab.Upsert(&a, val(1), 0)
	mustMiss(t, tab, b, 0)
	tab.Upsert(&b, val(2), 0)
	if ea, eb := mustFind(t, tab, a, 0), mustFind(t, tab, b, 0); ea.Backend != 1 || eb.Backend != 2 {
		t.Errorf("backends %d, %d; want 1, 2", ea.Backend, eb.Backend)
	}
}

// TestT4_ServiceScopesEntries: the same tuple under two services is two
// entries that never see each other.
func TestT4_ServiceScopesEntries(t *testing.T) {
	tab := mustNew(t, 1024)
	k1, k2 := key5(3), key5(3)
	k1.Service, k2.Service = 10, 11
	tab.Upsert(&k1, val(10), 0)
	mustMiss(t, tab, k2, 0)
	if r := tab.Upsert(&k2, val(11), 0); r != Inserted {
		t.Fatalf("Upsert for the second service = %v, want inserted", r)
	}
	if e := mustFind(t, tab, k1, 0); e.Backend != 10 {
		t.Errorf("service 10 backend %d", e.Backend)
	}
	tab.Delete(&k2)
	if e := mustFind(t, tab, k1, 0); e.Backend != 10 {
		t.Errorf("after deleting service 11: service 10 backend %d", e.Backend)
	}
	mustMiss(t, tab, k2, 0)
}

// TestM1_ExpiryAtExactlyIdleSec: valid at IdleSec*1000-1 ms after the last
// use, gone at IdleSec*1000; Touch moves the deadline.
func TestM1_ExpiryAtExactlyIdleSec(t *testing.T) {
	tab := mustNew(t, 1024)
	k := key5(1)
	const t0 = 1_000_000
	tab.Upsert(&k, Value{Backend: 9, IdleSec: 60}, t0)
	e := mustFind(t, tab, k, t0+59_999)
	if e.LastUse != t0 || e.IdleSec != 60 {
		t.Fatalf("entry %+v", e)
	}
	mustMiss(t, tab, k, t0+60_000)

	// Touch at t0+30s: now valid until t0+90s-1ms.
	e = mustFind(t, tab, k, t0+30_000)
	tab.Touch(&e, t0+30_000)
	if e.LastUse != t0+30_000 {
		t.Errorf("Touch did not update Entry.LastUse: %d", e.LastUse)
	}
	if e := mustFind(t, tab, k, t0+89_999); e.LastUse != t0+30_000 {
		t.Errorf("LastUse after Touch = %d", e.LastUse)
	}
	mustMiss(t, tab, k, t0+90_000)

	// A clock that runs behind another worker's never moves LastUse back.
	e = mustFind(t, tab, k, t0+40_000)
	tab.Touch(&e, t0+20_000)
	if e := mustFind(t, tab, k, t0+40_000); e.LastUse != t0+30_000 {
		t.Errorf("Touch with an older clock moved LastUse to %d", e.LastUse)
	}
}

func TestM1_IdleSecPerEntryAndClamped(t *testing.T) {
	tab := mustNew(t, 1024)
	for i, idle := range []uint32{1, 5, MaxIdleSec} {
		k := key5(i)
		tab.Upsert(&k, Value{IdleSec: idle}, 0)
		mustFind(t, tab, k, int64(idle)*1000-1)
		mustMiss(t, tab, k, int64(idle)*1000)
	}
	k := key5(100)
	tab.Upsert(&k, Value{IdleSec: 0}, 0) // clamped to 1 s
	if e := mustFind(t, tab, k, 999); e.IdleSec != 1 {
		t.Errorf("IdleSec 0 stored as %d, want 1", e.IdleSec)
	}
	k = key5(101)
	tab.Upsert(&k, Value{IdleSec: 1 << 30}, 0) // clamped to a day
	if e := mustFind(t, tab, k, 0); e.IdleSec != MaxIdleSec {
		t.Errorf("IdleSec 1<<30 stored as %d, want %d", e.IdleSec, MaxIdleSec)
	}
}

// TestX3_CapacityBounded inserts ten times the capacity in distinct keys:
// Len never exceeds Capacity, every displaced entry is counted.
func TestX3_CapacityBounded(t *testing.T) {
	tab := mustNew(t, 1024)
	c := tab.Capacity()
	var evicted int
	for i := range 10 * c {
		k := key5(i)
		switch tab.Upsert(&k, val(i), int64(i)) {
		case Evicted:
			evicted++
		case Inserted:
		default:
			t.Fatalf("Upsert of new key %d: not inserted or evicted", i)
		}
		if n := tab.Len(); n > c {
			t.Fatalf("after %d inserts Len = %d > Capacity %d", i+1, n, c)
		}
	}
	s := tab.Stats()
	if s.Inserts != uint64(10*c) || s.Evictions != uint64(evicted) || s.Updates != 0 || s.Reclaimed != 0 {
		t.Errorf("stats %+v; want %d inserts, %d evictions", s, 10*c, evicted)
	}
	if evicted < 9*c {
		t.Errorf("%d evictions, want at least %d", evicted, 9*c)
	}
	if tab.Len() != c { // 80 keys per bucket on average: every bucket is full
		t.Errorf("Len = %d, want %d", tab.Len(), c)
	}
	// LRU per bucket: the last key inserted is always still there, and
	// every survivor is among the most recent inserts.
	mustFind(t, tab, key5(10*c-1), int64(10*c))
	n := 0
	tab.Range(int64(10*c), func(k Key, e Entry) bool {
		n++
		if int(e.Backend) < 5*c {
			t.Errorf("survivor %d is older than the last 5*capacity inserts", e.Backend)
		}
		return true
	})
	if n != c {
		t.Errorf("Range saw %d entries, want %d", n, c)
	}
}

// TestX3_EvictsLeastRecentlyUsed: in a full bucket the victim is the entry
// with the oldest last use, counting Touch.
func TestX3_EvictsLeastRecentlyUsed(t *testing.T) {
	tab := oneBucket(t)
	for i := range slotsPerBucket {
		k := key5(i)
		tab.Upsert(&k, val(i), int64(10*i)) // key 0 oldest, then 1, ...
	}
	e := mustFind(t, tab, key5(0), 100)
	tab.Touch(&e, 100) // key 0 is now the most recent; key 1 the oldest
	k := key5(99)
	if r := tab.Upsert(&k, val(99), 200); r != Evicted {
		t.Fatalf("Upsert into a full bucket = %v, want evicted", r)
	}
	mustMiss(t, tab, key5(1), 200)
	for i := range slotsPerBucket {
		if i == 1 {
			continue
		}
		if e := mustFind(t, tab, key5(i), 200); e.Backend != uint32(i) {
			t.Errorf("key %d: backend %d", i, e.Backend)
		}
	}
	mustFind(t, tab, key5(99), 200)
	if s := tab.Stats(); s.Evictions != 1 || s.Inserts != slotsPerBucket+1 || tab.Len() != slotsPerBucket {
		t.Errorf("stats %+v, Len %d", s, tab.Len())
	}
}

// TestX3_ReclaimsExpiredBeforeEvicting: an expired slot is reused before
// any live entry is evicted, even a less recently used one.
func TestX3_ReclaimsExpiredBeforeEvicting(t *testing.T) {
	tab := oneBucket(t)
	const short = slotsPerBucket - 3 // 5 of 8
	for i := range slotsPerBucket {
		k := key5(i)
		v := Value{Backend: uint32(i), IdleSec: 600}
		if i == short {
			v.IdleSec = 1
		}
		tab.Upsert(&k, v, int64(1000*i)) // key short expires a second after its use
	}
	k := key5(99)
	now := int64(1000 * (short + 1))
	if r := tab.Upsert(&k, val(99), now); r != Inserted {
		t.Fatalf("Upsert = %v, want inserted into the expired slot", r)
	}
	mustMiss(t, tab, key5(short), now)
	mustFind(t, tab, key5(0), now) // the LRU live entry survives
	if s := tab.Stats(); s.Reclaimed != 1 || s.Evictions != 0 || tab.Len() != slotsPerBucket {
		t.Errorf("stats %+v, Len %d", s, tab.Len())
	}
}

func TestUpsertOverwriteReturnsUpdated(t *testing.T) {
	tab := mustNew(t, 1024)
	k := key5(1)
	if r := tab.Upsert(&k, Value{Backend: 1, Side: 0, IdleSec: 60}, 0); r != Inserted {
		t.Fatalf("first Upsert = %v", r)
	}
	if r := tab.Upsert(&k, Value{Backend: 2, Side: 1, IdleSec: 30}, 5000); r != Updated {
		t.Fatalf("second Upsert = %v, want updated", r)
	}
	e := mustFind(t, tab, k, 5000)
	if e.Value != (Value{Backend: 2, Side: 1, IdleSec: 30}) || e.LastUse != 5000 {
		t.Errorf("entry %+v", e)
	}
	if tab.Len() != 1 {
		t.Errorf("Len = %d", tab.Len())
	}
	// Overwriting the key's own expired entry is a new connection.
	if r := tab.Upsert(&k, val(3), 5000+30_000); r != Inserted {
		t.Errorf("Upsert over the expired entry = %v, want inserted", r)
	}
	if s := tab.Stats(); s.Inserts != 2 || s.Updates != 1 || s.Reclaimed != 1 || tab.Len() != 1 {
		t.Errorf("stats %+v, Len %d", s, tab.Len())
	}
}

func TestDelete(t *testing.T) {
	tab := oneBucket(t)
	for i := range slotsPerBucket {
		k := key5(i)
		tab.Upsert(&k, val(i), 0)
	}
	k := key5(3)
	if !tab.Delete(&k) {
		t.Fatal("Delete of a present key = false")
	}
	mustMiss(t, tab, k, 0)
	if tab.Delete(&k) {
		t.Error("second Delete = true")
	}
	if tab.Len() != slotsPerBucket-1 {
		t.Errorf("Len = %d", tab.Len())
	}
	// The freed slot takes the next key without evicting anyone.
	k = key5(50)
	if r := tab.Upsert(&k, val(50), 1); r != Inserted {
		t.Errorf("Upsert after Delete = %v, want inserted", r)
	}
	for i := range slotsPerBucket {
		if i != 3 {
			mustFind(t, tab, key5(i), 1)
		}
	}
	mustFind(t, tab, key5(50), 1)
	if s := tab.Stats(); s.Deletes != 1 || s.Evictions != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestTouchAfterSlotReuse: a Touch through an entry whose slot has since
// been given to another key does not refresh that key.
func TestTouchAfterSlotReuse(t *testing.T) {
	tab := oneBucket(t)
	a, b := key5(1), key5(2)
	tab.Upsert(&a, val(1), 0)
	e := mustFind(t, tab, a, 0)
	tab.Delete(&a)
	tab.Upsert(&b, val(2), 10) // lands in a's old slot (the first free)
	tab.Touch(&e, 50_000)
	if eb := mustFind(t, tab, b, 50_000); eb.LastUse != 10 {
		t.Errorf("stale Touch changed another entry: LastUse %d", eb.LastUse)
	}
	var zero Entry
	tab.Touch(&zero, 1) // an Entry from a miss is ignored
}

func TestRange(t *testing.T) {
	tab := mustNew(t, 1024)
	want := map[Key]uint32{}
	for i := range 100 {
		k := key5(i)
		v := val(i)
		if i%4 == 0 {
			v.IdleSec = 1 // expired by the time we range
		} else {
			want[k] = uint32(i)
		}
		tab.Upsert(&k, v, 0)
	}
	del := key5(1)
	tab.Delete(&del)
	delete(want, del)

	got := map[Key]uint32{}
	tab.Range(1000, func(k Key, e Entry) bool {
		if _, dup := got[k]; dup {
			t.Errorf("Range visited %v twice", k)
		}
		got[k] = e.Backend
		return true
	})
	if len(got) != len(want) {
		t.Errorf("Range saw %d entries, want %d", len(got), len(want))
	}
	for k, b := range want {
		if got[k] != b {
			t.Errorf("%v: backend %d, want %d", k, got[k], b)
		}
	}
	n := 0
	tab.Range(1000, func(Key, Entry) bool { n++; return n < 5 })
	if n != 5 {
		t.Errorf("Range did not stop when fn returned false: %d calls", n)
	}
	// Entries from Range can be touched.
	tab.Range(1000, func(k Key, e Entry) bool {
		tab.Touch(&e, 2000)
		if e2 := mustFind(t, tab, k, 2000); e2.LastUse != 2000 {
			t.Errorf("Touch from Range: LastUse %d", e2.LastUse)
		}
		return false
	})
}

func TestKeyString(t *testing.T) {
	k := key5(0x010203)
	if got, want := k.String(), "svc 1 5T proto 6 10.1.2.3:17075 -> 192.0.2.1:443"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	k.Kind, k.SrcPort, k.DstPort, k.Proto = Kind2T, 0, 0, 0
	if got, want := k.String(), "svc 1 2T 10.1.2.3 -> 192.0.2.1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestKeyWordsRoundTrip(t *testing.T) {
	k := key5(12345)
	k.Src[0], k.Dst[7], k.Service = 0xfe, 0x80, 0xbeef
	var w keyWords
	w.from(&k)
	if got := w.key(); got != k {
		t.Errorf("round trip: %v, want %v", got, k)
	}
}

// TestAllocs: the hot-path operations never allocate.
func TestAllocs(t *testing.T) {
	tab := mustNew(t, 1024)
	k, miss := key5(1), key5(2)
	tab.Upsert(&k, val(1), 0)
	now := int64(0)
	for name, f := range map[string]func(){
		"Lookup": func() { tab.Lookup(&k, now) },
		"Miss":   func() { tab.Lookup(&miss, now) },
		"Touch": func() {
			now++
			e, _ := tab.Lookup(&k, now)
			tab.Touch(&e, now)
		},
		"Upsert": func() { now++; tab.Upsert(&k, val(1), now) },
		"Delete": func() { tab.Upsert(&miss, val(2), now); tab.Delete(&miss) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", name, n)
		}
	}
}

// TestUpsertHint_SameAsUpsert: an entry recorded with the hint a lookup
// computed is found, overwritten and counted exactly as with Upsert.
func TestUpsertHint_SameAsUpsert(t *testing.T) {
	tab, err := New(1024)
	if err != nil {
		t.Fatal(err)
	}
	// A fixed seed (the table is empty): with New's random one, more than a
	// bucket's 8 of the 200 flows could, rarely, share a bucket, and the
	// insert would evict, which is not what this test is about.
	tab.seed = [6]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 1, 2, 3}
	for i := range 200 {
		k := key5(i)
		h := tab.Hint(&k)
		if _, ok := tab.LookupHint(&k, h, 1); ok {
			t.Fatalf("flow %d found before it was recorded", i)
		}
		if r := tab.UpsertHint(&k, h, val(i), 1); r != Inserted {
			t.Fatalf("UpsertHint flow %d = %v, want inserted", i, r)
		}
		if r := tab.Upsert(&k, val(i+1000), 2); r != Updated {
			t.Fatalf("Upsert after UpsertHint, flow %d = %v, want updated", i, r)
		}
		if e := mustFind(t, tab, k, 3); e.Backend != uint32(i+1000) {
			t.Fatalf("flow %d: backend %d, want %d", i, e.Backend, i+1000)
		}
	}
	if n := tab.Len(); n != 200 {
		t.Errorf("%d entries, want 200", n)
	}
}

// TestReachCoversEveryKey: random upserts (some expiring), deletes and
// evictions in a few small tables, every key in its own home or beyond it;
// after each operation every stored key is still found by Lookup (its
// home's reach covers it), is stored once, and no reach goes past the
// farthest key of its home (deletes and evictions shrink it back).
func TestReachCoversEveryKey(t *testing.T) {
	for _, buckets := range []int{1, 2, 4} {
		tab := newTable(buckets) // zero seed: the same walk every run
		rng := rand.New(rand.NewPCG(uint64(buckets), 3))
		now := int64(1000)
		for op := range 20000 {
			k := key5(rng.IntN(40))
			switch r := rng.IntN(10); {
			case r < 6:
				v := val(op)
				v.IdleSec = uint32(1 + rng.IntN(3))
				tab.Upsert(&k, v, now)
				mustFind(t, tab, k, now)
			case r < 9:
				tab.Delete(&k)
				mustMiss(t, tab, k, now)
			default:
				now += 1000
			}
			checkReach(t, tab, op)
		}
		// With two buckets every key's pair is the whole table: nowhere
		// to move to.
		if s := tab.Stats(); (buckets > 1 && s.Spills == 0) || (buckets > 2 && s.Moves == 0) {
			t.Errorf("%d buckets: stats %+v, no spill or move exercised", buckets, s)
		}
	}
}

// checkReach checks the invariants of TestReachCoversEveryKey over every
// stored slot, expired or not.
func checkReach(t *testing.T, tab *Table, op int) {
	t.Helper()
	seen := map[Key]bool{}
	for bi := range tab.buckets {
		b := &tab.buckets[bi]
		var far [slotsPerBucket]int
		for i := range slotsPerBucket {
			h := b.slots[i].hdr.Load()
			if h&hdrUsed == 0 {
				continue
			}
			var w keyWords
			for j := range w {
				w[j] = b.slots[i].key[j].Load()
			}
			k := w.key()
			if seen[k] {
				t.Fatalf("op %d: %v stored twice", op, k)
			}
			seen[k] = true
			hint := tab.Hint(&k)
			wantBi, wantHome := hint.bi, hint.home
			if h&altBit != 0 {
				wantBi, wantHome = hint.bi2, hint.home2
				if hint.bi2 == hint.bi {
					t.Fatalf("op %d: %v stored as a second choice but has one bucket", op, k)
				}
				if tab.buckets[hint.bi].slots[hint.home].hdr.Load()&spillBit == 0 {
					t.Fatalf("op %d: %v in its second bucket, its first home has no spill bit", op, k)
				}
			}
			if wantBi != uint64(bi) || int(wantHome) != hdrHome(h) {
				t.Fatalf("op %d: %v in bucket %d home %d (alt %v), hashes to %d home %d", op, k, bi, hdrHome(h), h&altBit != 0, wantBi, wantHome)
			}
			p := i ^ hdrHome(h)
			far[hdrHome(h)] = max(far[hdrHome(h)], p)
			if p > hdrReach(b.slots[hdrHome(h)].hdr.Load()) {
				t.Fatalf("op %d: %v at probe %d, past its home's reach", op, k, p)
			}
			if _, ok := tab.LookupHint(&k, hint, 0); !ok { // at 0 nothing has expired
				t.Fatalf("op %d: stored %v not found", op, k)
			}
		}
		for home := range slotsPerBucket {
			if r := hdrReach(b.slots[home].hdr.Load()); r != far[home] {
				t.Fatalf("op %d: bucket %d home %d reach %d, farthest key at %d", op, bi, home, r, far[home])
			}
		}
	}
}

// TestHashSpreadsKeys: keys that differ only in their source port, or only
// in their source address, IPv4 (the short form of the hash) and IPv6,
// spread over the buckets as random placement would, for many seeds: 8192
// keys in 1024 buckets, 8 per bucket on average, none above 30 (random
// placement: about 20 at most).
func TestHashSpreadsKeys(t *testing.T) {
	v6 := func(k Key) Key {
		k.Src[0], k.Dst[0] = 0x20, 0x20
		return k
	}
	forms := []struct {
		name string
		key  func(i int) Key
	}{
		{"IPv4, ports", func(i int) Key { k := key5(0); k.SrcPort = uint16(i); return k }},
		{"IPv4, addresses", func(i int) Key { k := key5(i); k.SrcPort = 1; return k }},
		{"IPv6, ports", func(i int) Key { k := v6(key5(0)); k.SrcPort = uint16(i); return k }},
		{"IPv6, addresses", func(i int) Key { k := v6(key5(i)); k.SrcPort = 1; return k }},
	}
	for _, f := range forms {
		for seed := range 50 {
			tab := newTable(1024)
			rng := rand.New(rand.NewPCG(uint64(seed), 9))
			for i := range tab.seed {
				tab.seed[i] = rng.Uint64()
			}
			var load [1024]int
			worst := 0
			for i := range 8192 {
				k := f.key(i)
				h := tab.Hint(&k)
				load[h.bi]++
				worst = max(worst, load[h.bi])
			}
			if worst > 30 {
				t.Errorf("%s, seed %d: %d keys in one bucket", f.name, seed, worst)
			}
		}
	}
}

// TestX3_HalfOpenEvictedFirst: in a full bucket a new key displaces the
// least recently used half-open entry, even one used more recently than
// every established entry; with no half-open entry, the least recently used
// established one. Evictions are counted by reason.
func TestX3_HalfOpenEvictedFirst(t *testing.T) {
	tab := oneBucket(t)
	for i := range slotsPerBucket {
		v := val(i)
		v.HalfOpen = i >= slotsPerBucket-2 // the two most recent
		k := key5(i)
		tab.Upsert(&k, v, int64(100+i))
	}
	k := key5(100)
	if r := tab.Upsert(&k, val(100), 200); r != Evicted {
		t.Fatalf("Upsert into a full bucket: %v, want evicted", r)
	}
	mustMiss(t, tab, key5(slotsPerBucket-2), 200) // older of the half-open pair
	for i := range slotsPerBucket - 2 {
		mustFind(t, tab, key5(i), 200)
	}
	mustFind(t, tab, key5(slotsPerBucket-1), 200)
	k = key5(101)
	tab.Upsert(&k, val(101), 201)
	mustMiss(t, tab, key5(slotsPerBucket-1), 201)
	k = key5(102)
	tab.Upsert(&k, val(102), 202)
	mustMiss(t, tab, key5(0), 202) // no half-open left: LRU
	if s := tab.Stats(); s.Evictions != 3 || s.EvictionsHalfOpen != 2 {
		t.Errorf("stats %+v, want 3 evictions, 2 of them half-open", s)
	}
	e := mustFind(t, tab, key5(1), 202)
	if e.HalfOpen {
		t.Errorf("established entry reads back half-open: %+v", e)
	}
}

// TestValueHalfOpenRoundTrip: the half-open mark and the largest idle
// timeout survive packing side by side.
func TestValueHalfOpenRoundTrip(t *testing.T) {
	for _, v := range []Value{
		{Backend: 7, Side: 1, IdleSec: MaxIdleSec, HalfOpen: true},
		{Backend: 1<<32 - 1, Side: 255, IdleSec: MaxIdleSec},
		{Backend: 3, IdleSec: 5, HalfOpen: true},
	} {
		if got := unpack(v.pack()); got != v {
			t.Errorf("unpack(pack(%+v)) = %+v", v, got)
		}
	}
	v := Value{IdleSec: 5, HalfOpen: true}.pack()
	if expired(v, 0, 4999) || !expired(v, 0, 5000) {
		t.Error("a half-open entry's timeout is not its IdleSec")
	}
}

// TestX3_HalfOpenNeverEvictsEstablished: a new half-open key (an entry on
// probation) that finds every slot it may take held by a live established
// entry is not stored (Refused, counted) and displaces nothing; one that
// finds a half-open entry evicts it; an established newcomer still evicts
// the least recently used; a half-open overwrite of a stored key is an
// update, refused never. Both with a single bucket and with a table whose
// every pair is full (two buckets, no key can move).
func TestX3_HalfOpenNeverEvictsEstablished(t *testing.T) {
	for _, tc := range []struct {
		name string
		tab  func() *Table
		one  bool // every key in the one bucket: the eviction order is known
	}{
		{"one bucket", func() *Table { return oneBucket(t) }, true},
		{"two buckets", func() *Table { return newTable(2) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := tc.tab()
			n := tab.Capacity()
			// Filled with established entries (a key whose two buckets
			// are one may evict another established key meanwhile).
			last := 0
			for i := 0; tab.Len() < n; i++ {
				k := key5(i)
				tab.Upsert(&k, val(i), int64(100+i))
				last = i
			}
			now := int64(100 + last + 1)
			var stored []Key
			tab.Range(now, func(k Key, e Entry) bool { stored = append(stored, k); return true })
			before := tab.Stats()
			for j := range 50 {
				k := key5(1000 + j)
				v := val(1000 + j)
				v.HalfOpen = true
				if r := tab.Upsert(&k, v, now); r != Refused {
					t.Fatalf("half-open newcomer %d into a table full of established entries: %v, want refused", j, r)
				}
				mustMiss(t, tab, k, now)
			}
			for _, k := range stored {
				mustFind(t, tab, k, now)
			}
			if s := tab.Stats(); s.Refused != 50 || s.Evictions != before.Evictions || s.Inserts != before.Inserts {
				t.Errorf("stats %+v, want 50 refused, no eviction, no insert since %+v", s, before)
			}
			// A stored key on probation again (a SYN on an established
			// entry's key): updated in place.
			k0 := stored[0]
			if tc.one {
				k0 = key5(0) // the oldest: key 1 is then the oldest established
			}
			h := val(0)
			h.HalfOpen = true
			if r := tab.Upsert(&k0, h, now); r != Updated {
				t.Fatalf("half-open overwrite of a stored key: %v, want updated", r)
			}
			if !tc.one {
				// An established newcomer still evicts.
				k := key5(3000)
				if r := tab.Upsert(&k, val(3000), now+2); r != Evicted {
					t.Fatalf("established newcomer into a full table: %v, want evicted", r)
				}
				return
			}
			// Now a half-open entry is there: a half-open newcomer takes
			// its slot.
			k := key5(2000)
			if r := tab.Upsert(&k, h, now+1); r != Evicted {
				t.Fatalf("half-open newcomer with a half-open entry to evict: %v, want evicted", r)
			}
			mustMiss(t, tab, k0, now+1)
			// An established newcomer evicts the half-open entry first,
			// then the least recently used established one (key 1, the
			// oldest left).
			for j, gone := range []Key{k, key5(1)} {
				k := key5(3000 + j)
				if r := tab.Upsert(&k, val(3000+j), now+2); r != Evicted {
					t.Fatalf("established newcomer %d into a full table: %v, want evicted", j, r)
				}
				mustMiss(t, tab, gone, now+2)
			}
			if s := tab.Stats(); s.Evictions != 3 || s.EvictionsHalfOpen != 2 || s.Refused != 50 {
				t.Errorf("stats %+v, want 3 evictions (2 half-open), 50 refused", s)
			}
		})
	}
}

// TestX3_EveryKeyHasTwoBuckets: a key whose two hash fields pick the same
// bucket still has a second one, so a full first bucket does not make it
// evict a live entry while the table is nearly empty.
func TestX3_EveryKeyHasTwoBuckets(t *testing.T) {
	tab := newTable(128) // zero seed: the same keys every run
	same := -1
	for i := 0; i < 1<<20 && same < 0; i++ {
		k := key5(i)
		var w keyWords
		w.from(&k)
		if h := hash(&w, &tab.seed); h&tab.mask == h>>29&tab.mask {
			same = i
		}
	}
	if same < 0 {
		t.Fatal("no key with both hash fields on one bucket among 2^20")
	}
	k := key5(same)
	h := tab.Hint(&k)
	if h.bi2 == h.bi {
		t.Fatalf("key %d: second bucket %d is its first", same, h.bi2)
	}
	// Fill its first bucket with keys of that first bucket.
	var fill []int
	for i := same + 1; len(fill) < slotsPerBucket; i++ {
		f := key5(i)
		if tab.Hint(&f).bi == h.bi {
			if r := tab.Upsert(&f, val(i), 1); r != Inserted {
				t.Fatalf("filling bucket %d with key %d: %v", h.bi, i, r)
			}
			fill = append(fill, i)
		}
	}
	if r := tab.Upsert(&k, val(same), 1); r != Inserted {
		t.Fatalf("key %d into a full first bucket of an empty table: %v, want Inserted", same, r)
	}
	for _, i := range append(fill, same) {
		f := key5(i)
		if e, ok := tab.Lookup(&f, 1); !ok || e.Value != val(i) {
			t.Errorf("key %d: %+v, %v after the insert", i, e, ok)
		}
	}
}
