package testbed

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// Exec runs a command in namespace ns (`ip netns exec`) and returns its
// combined output; the error carries the output too.
func Exec(ns string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("in %s: %s: %w\n%s", ns, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}
