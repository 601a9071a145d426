//go:build !linux

package conntrack

import "errors"

// Open is Linux only: tables are kept in files on Linux alone.
func Open(path string, capacity int, now int64) (*Table, OpenInfo, error) {
	return nil, OpenInfo{}, errors.New("conntrack: table files need Linux")
}
