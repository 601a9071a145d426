//go:build !linux

package worker

import "errors"

// pin is not supported off Linux (the data plane is Linux-only anyway).
func pin(int) error { return errors.New("CPU pinning needs Linux") }
