package xdp

import (
	"context"
	"errors"
)

// nftlbForwarder is baseline (c). PLACEHOLDER until bench/baseline/nftlb
// lands: it reports itself as not measured.
func (b *bench) nftlbForwarder() *forwarder {
	return &forwarder{name: "nftlb", variants: []variant{{name: "nftlb", desc: variantDesc["nftlb"], port: portXLB}},
		start: func(context.Context) error {
			return errors.New("the baseline package bench/baseline/nftlb is not available yet")
		},
		stop:  func() error { return nil },
		alive: func() error { return nil },
	}
}
