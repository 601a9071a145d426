package topo

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// run runs a command and returns its combined output; the error carries it.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Exec runs a command inside namespace ns with `ip netns exec`, which also
// mounts the namespace's own /sys.
func Exec(ns string, args ...string) (string, error) {
	return run("ip", append([]string{"netns", "exec", ns}, args...)...)
}
