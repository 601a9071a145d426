package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestConcurrent: writes from several goroutines, read while they run
// (-race watches), all end up in the buffer whole.
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "w%d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	s := b.String()
	for i := range 4 {
		if n := strings.Count(s, fmt.Sprintf("w%d\n", i)); n != 100 {
			t.Errorf("w%d written %d times, want 100", i, n)
		}
	}
}
