package afxdp

import (
	"errors"
	"strings"
	"testing"
	"time"

	"xlb/dataplane"
)

func TestDefaultOpts(t *testing.T) {
	o := DefaultOpts()
	if err := o.Validate(); err != nil {
		t.Fatalf("DefaultOpts do not validate: %v", err)
	}
	if o.Headroom < dataplane.Headroom || !o.NeedWakeup || o.ZeroCopy != ZeroCopyAuto {
		t.Errorf("DefaultOpts = %+v: want Headroom >= %d, NeedWakeup, ZeroCopyAuto", o, dataplane.Headroom)
	}
}

// TestOpts_Rejected: each bad option is refused by Validate and by New
// (before any syscall), with an error that names the field.
func TestOpts_Rejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Opts)
		want string
	}{
		{"frame size", func(o *Opts) { o.FrameSize = 3000 }, "FrameSize 3000: must be 2048 or 4096"},
		{"no frames", func(o *Opts) { o.NumFrames = 0 }, "NumFrames 0"},
		{"too many frames", func(o *Opts) { o.NumFrames = 1 << 21 }, "NumFrames 2097152"},
		{"fill not power of 2", func(o *Opts) { o.FillRingSize = 1000 }, "FillRingSize 1000: must be a power of 2"},
		{"rx zero", func(o *Opts) { o.RxRingSize = 0 }, "RxRingSize 0: must be a power of 2"},
		{"tx huge", func(o *Opts) { o.TxRingSize = 1 << 21; o.CompletionRingSize = 1 << 21 }, "TxRingSize 2097152"},
		{"completion < tx", func(o *Opts) { o.CompletionRingSize = 512; o.TxRingSize = 1024 }, "CompletionRingSize 512: must be >= TxRingSize 1024"},
		{"headroom", func(o *Opts) { o.FrameSize = 2048; o.Headroom = 512 }, "Headroom 512: leaves 1280 bytes"},
		{"zero copy", func(o *Opts) { o.ZeroCopy = 7 }, "ZeroCopy 7"},
		{"bind retry", func(o *Opts) { o.BindRetry = -time.Second }, "BindRetry -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOpts()
			tc.edit(&o)
			err := o.Validate()
			if !errors.Is(err, ErrInvalidOpts) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalidOpts naming %q", err, tc.want)
			}
			s, err := New(1, 0, o)
			if s != nil || !errors.Is(err, ErrInvalidOpts) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want ErrInvalidOpts naming %q", s, err, tc.want)
			}
		})
	}
	// Every problem is named, not just the first.
	o := DefaultOpts()
	o.FrameSize, o.RxRingSize = 1, 3
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "FrameSize 1") || !strings.Contains(err.Error(), "RxRingSize 3") {
		t.Errorf("Validate with two bad fields = %v, want both named", err)
	}
	for _, tc := range []struct {
		ifindex, queue int
		want           string
	}{
		{0, 0, "ifindex 0: must be > 0"},
		{-3, 0, "ifindex -3"},
		{1, -1, "queue -1: must be >= 0"},
	} {
		if _, err := New(tc.ifindex, tc.queue, DefaultOpts()); !errors.Is(err, ErrInvalidOpts) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%d, %d) = %v, want ErrInvalidOpts naming %q", tc.ifindex, tc.queue, err, tc.want)
		}
	}
	if _, err := NewFramePort(nil, 0); !errors.Is(err, ErrInvalidOpts) {
		t.Errorf("NewFramePort(batch 0) = %v, want ErrInvalidOpts", err)
	}
}

func TestParseZeroCopy(t *testing.T) {
	for _, z := range []ZeroCopy{ZeroCopyAuto, ZeroCopyOn, ZeroCopyOff} {
		got, err := ParseZeroCopy(z.String())
		if err != nil || got != z {
			t.Errorf("ParseZeroCopy(%q) = %v, %v", z.String(), got, err)
		}
	}
	if _, err := ParseZeroCopy("yes"); !errors.Is(err, ErrInvalidOpts) || !strings.Contains(err.Error(), `"yes"`) {
		t.Errorf("ParseZeroCopy(yes) = %v, want ErrInvalidOpts naming it", err)
	}
	if s := ZeroCopy(9).String(); s != "ZeroCopy(9)" {
		t.Errorf("ZeroCopy(9).String() = %q", s)
	}
}
