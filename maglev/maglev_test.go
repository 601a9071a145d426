package maglev

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const pp = 0.01 // one percentage point

func TestIsPrime(t *testing.T) {
	var got []uint32
	for n := uint32(0); n < 60; n++ {
		if IsPrime(n) {
			got = append(got, n)
		}
	}
	want := []uint32{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59}
	if !slices.Equal(got, want) {
		t.Errorf("primes below 60: %v, want %v", got, want)
	}
	for _, n := range []uint32{251, 65537, 131071, 4294967291} {
		if !IsPrime(n) {
			t.Errorf("IsPrime(%d) = false", n)
		}
	}
	for _, n := range []uint32{65535, 65536, 65539 * 3, 65521 * 65519, 4294967295} {
		if IsPrime(n) {
			t.Errorf("IsPrime(%d) = true", n)
		}
	}
}

func TestS2_UnweightedShares(t *testing.T) {
	for _, n := range []int{3, 5, 10} {
		bs := backendsN(n, 1)
		want := make([]float64, n)
		for i := range want {
			want[i] = 1 / float64(n)
		}
		checkShares(t, shares(build(t, DefaultSize, bs), n), want, pp)
	}
}

func TestS2_WeightedShares(t *testing.T) {
	for _, tc := range []struct {
		weights []uint32
		want    []float64
	}{
		{[]uint32{1, 4}, []float64{0.20, 0.80}},
		{[]uint32{0, 2, 6}, []float64{0, 0.25, 0.75}},
		{[]uint32{1000, 500, 250, 250}, []float64{0.5, 0.25, 0.125, 0.125}},
		{[]uint32{1000, 1, 999}, []float64{1000.0 / 2000, 1.0 / 2000, 999.0 / 2000}},
	} {
		bs := weighted(tc.weights...)
		checkShares(t, shares(build(t, DefaultSize, bs), len(bs)), tc.want, pp)
	}
}

func TestS2_WeightZeroGetsNoSlot(t *testing.T) {
	bs := weighted(0, 2, 6)
	for _, idx := range build(t, DefaultSize, bs) {
		if idx == 0 {
			t.Fatal("weight-0 backend holds a slot")
		}
	}
}

func TestW1b_AllZeroWeightsShareEqually(t *testing.T) {
	bs := weighted(0, 0, 0, 0)
	checkShares(t, shares(build(t, DefaultSize, bs), len(bs)), []float64{0.25, 0.25, 0.25, 0.25}, pp)
	// Same table as all weights 1: "treated as equal weights".
	if !slices.Equal(build(t, DefaultSize, bs), build(t, DefaultSize, weighted(1, 1, 1, 1))) {
		t.Error("all-zero table differs from all-one table")
	}
}

func TestS3_SameInputSameTable(t *testing.T) {
	bs := weighted(3, 1, 4, 1, 5)
	b, _ := NewBuilder(DefaultSize)
	first := make([]uint16, DefaultSize)
	if err := b.Build(bs, first); err != nil {
		t.Fatal(err)
	}
	// Same Builder reused after a different build, and a fresh Builder.
	other := make([]uint16, DefaultSize)
	if err := b.Build(backendsN(100, 7), other); err != nil {
		t.Fatal(err)
	}
	again := make([]uint16, DefaultSize)
	if err := b.Build(bs, again); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first, again) || !slices.Equal(first, build(t, DefaultSize, bs)) {
		t.Error("same backends gave different tables")
	}
	for h := uint64(0); h < 1000; h++ {
		x := h * 0x9e3779b97f4a7c15
		if Lookup(first, x) != first[x%DefaultSize] {
			t.Fatalf("Lookup(%#x) != table[h %% M]", x)
		}
	}
}

func TestS5_OrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bs := range [][]Backend{weighted(3, 1, 4, 1, 5, 9, 2, 6), backendsN(100, 1), weighted(0, 0, 0)} {
		want := owners(build(t, DefaultSize, bs), bs)
		for range 50 {
			shuffled := slices.Clone(bs)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if got := owners(build(t, DefaultSize, shuffled), shuffled); !slices.Equal(got, want) {
				t.Fatalf("shuffled input %v maps slots to different keys", shuffled)
			}
		}
	}
}

// goldenSet is the fixed input of the golden tests.
var goldenSet = []Backend{
	{Key: "web/10.0.0.1", Weight: 1},
	{Key: "web/10.0.0.2", Weight: 1},
	{Key: "web/10.0.0.3", Weight: 2},
	{Key: "web/10.0.0.4", Weight: 3},
	{Key: "web/10.0.0.5", Weight: 0},
}

// TestS5_Golden pins the table format (S5). These values were computed once
// by this implementation and reproduced by an independent implementation of
// the package documentation (a Python script). They MUST NEVER change: if this test fails, the
// algorithm, the hash or the Key order changed, and load balancers of
// different versions would build different tables for the same set.
func TestS5_Golden(t *testing.T) {
	// sha256 over "Key\n" for every slot of the M=65537 table.
	const wantDigest = "718541bf4b0155aff284daac2792c2b47238b0f8b4025bcc2a7da0ba86936963"
	sum := sha256.New()
	for _, k := range owners(build(t, DefaultSize, goldenSet), goldenSet) {
		sum.Write([]byte(k + "\n"))
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != wantDigest {
		t.Errorf("M=%d digest %s, want %s", DefaultSize, got, wantDigest)
	}

	// The first 32 slots at M=251, by last octet of the Key.
	const wantSmall = "11443433334411143433334414143333"
	var sb strings.Builder
	for _, k := range owners(build(t, 251, goldenSet), goldenSet)[:32] {
		sb.WriteString(k[len(k)-1:])
	}
	if got := sb.String(); got != wantSmall {
		t.Errorf("M=251 first 32 slots %s, want %s", got, wantSmall)
	}
}

func TestErrors(t *testing.T) {
	for _, m := range []uint32{0, 1, 2, 3, 5, 4, 9, 65536, 65535, 4294967295} {
		if _, err := NewBuilder(m); !errors.Is(err, ErrNotPrime) {
			t.Errorf("NewBuilder(%d): %v, want ErrNotPrime", m, err)
		}
	}
	b, err := NewBuilder(13)
	if err != nil || b.Size() != 13 {
		t.Fatalf("NewBuilder(13) = %v, %v", b, err)
	}
	table := make([]uint16, 13)
	for _, tc := range []struct {
		name string
		bs   []Backend
		want error
	}{
		{"nil", nil, ErrNoBackends},
		{"empty", []Backend{}, ErrNoBackends},
		{"duplicate", []Backend{{"a", 1}, {"b", 1}, {"a", 2}}, ErrDuplicateKey},
		{"duplicate empty key", []Backend{{"", 1}, {"", 1}}, ErrDuplicateKey},
		{"too many", weighted(1, 1, 1, 1, 1, 1, 1), ErrTooManyBackends},
	} {
		if err := b.Build(tc.bs, table); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := b.Build(weighted(1, 1, 1, 1, 1, 1), table); err != nil {
		t.Errorf("M/2 backends: %v", err)
	}
	if err := b.Build(weighted(1), make([]uint16, 12)); err == nil {
		t.Error("wrong table length: no error")
	}
}

func TestBuildNoAllocs(t *testing.T) {
	bs := backendsN(1000, 1)
	b, _ := NewBuilder(DefaultSize)
	table := make([]uint16, DefaultSize)
	if err := b.Build(bs, table); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(5, func() { _ = b.Build(bs, table) }); n != 0 {
		t.Errorf("Build allocates %v times per run after warm-up", n)
	}
}
