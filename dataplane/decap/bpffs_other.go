//go:build !linux

package decap

import "errors"

// requireBPFFS: pins need Linux's bpffs.
func requireBPFFS(string) error { return errors.New("decap: needs Linux (bpffs, XDP)") }
