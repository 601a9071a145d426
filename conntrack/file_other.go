//go:build !linux

package conntrack

import "errors"

// ErrForeignFile: see the Linux build.
var ErrForeignFile = errors.New("not a conntrack table of a known layout and this boot")

// OpenInfo: see the Linux build.
type OpenInfo struct {
	Kept                   bool
	Migrated               bool
	FromLayout             uint32
	FromCapacity           int
	Entries, Torn, Dropped int
	Refused                error
	RefusedAs              string
}

// Open is Linux only: tables are kept in files on Linux alone.
func Open(path string, capacity int, now int64) (*Table, OpenInfo, error) {
	return nil, OpenInfo{}, errors.New("conntrack: table files need Linux")
}
