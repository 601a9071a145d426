package control

import (
	"unsafe"

	"xlb/dataplane"
)

// tableEntryBytes is the width of one Maglev table entry.
var tableEntryBytes = int(unsafe.Sizeof(dataplane.Service{}.Table[0]))
