//go:build !linux

package appliance

import (
	"context"
	"errors"
)

// Run needs XDP and AF_XDP: Linux only.
func (a *Appliance) Run(context.Context) error {
	return errors.New("needs Linux (XDP and AF_XDP)")
}
