// Package syncbuf is a bytes.Buffer that one goroutine may write while
// another reads it: the output of a child process (cmd.Stdout, cmd.Stderr)
// that a test or a benchmark watches while the child runs. It is not
// internal/nettest's: it has nothing to do with namespaces, and non-test
// code (lbbench) uses it without linking package testing in.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a mutex-guarded bytes.Buffer; the zero value is empty and
// ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p (io.Writer).
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is all written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
