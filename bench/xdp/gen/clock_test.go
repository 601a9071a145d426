package gen

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestFromMono: a CLOCK_MONOTONIC reading (the sink's receive stamps)
// converts to Now's clock (the payload's transmit stamps): it falls
// between two Now readings taken around it, give or take 2 µs.
func TestFromMono(t *testing.T) {
	for range 100 {
		a := Now()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		b := Now()
		if got := FromMono(ts.Nano()); got < a-2000 || got > b+2000 {
			t.Fatalf("FromMono %d outside [%d, %d]", got, a, b)
		}
	}
}
