package core

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// pprofTop summarises a CPU profile with `go tool pprof -top`: the profile
// package is not in this module's graph, and the go command is where a Go
// developer runs lbbench. Without it, the caller keeps the file
// (--cpuprofile) to look at elsewhere.
func pprofTop(file string) ([]ProfileLine, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, errors.New("no go command in PATH to summarise the profile; keep it with --cpuprofile FILE")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "tool", "pprof", "-top", "-nodecount=15", file).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("go tool pprof: %v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("go tool pprof: %v", err)
	}
	return parseTop(out)
}

// parseTop reads the table of `go tool pprof -top`:
//
//	 flat  flat%   sum%        cum   cum%
//	1.20s 30.00% 30.00%      1.50s 37.50%  xlb/conntrack.(*Table).LookupHint
func parseTop(out []byte) ([]ProfileLine, error) {
	var lines []ProfileLine
	header := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if !header {
			header = len(f) == 5 && f[0] == "flat" && f[1] == "flat%" && f[4] == "cum%"
			continue
		}
		if len(f) < 6 {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		lines = append(lines, ProfileLine{Function: strings.Join(f[5:], " "), FlatPct: flat, CumPct: cum})
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("go tool pprof -top: no function in its output:\n%s", out)
	}
	return lines, nil
}
