//go:build !linux

package control

import "errors"

// openVIPMap has no XDP program to load here.
func openVIPMap() (vipSetter, func(), string, error) {
	return nil, nil, "", errors.New("no XDP on this system")
}
