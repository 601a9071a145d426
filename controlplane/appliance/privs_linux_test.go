package appliance

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPrivErr: a refusal anywhere reads as the privileges hint; any other
// error, joined ones included, prints as one line naming the step.
func TestPrivErr(t *testing.T) {
	if got := privErr("loading", fmt.Errorf("deep: %w", unix.EPERM)).Error(); !strings.Contains(got, "needs root") || !strings.Contains(got, "loading") {
		t.Errorf("EPERM: %q, want the step and the privileges hint", got)
	}
	joined := errors.Join(errors.New("native: no"), errors.New("generic: no"))
	got := privErr("attaching", joined).Error()
	if strings.Contains(got, "\n") || !strings.Contains(got, "native: no; generic: no") || !strings.HasPrefix(got, "attaching: ") {
		t.Errorf("joined: %q, want one line with both", got)
	}
}
