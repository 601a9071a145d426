package config

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// Limits of [flow_sync], as docs/config.md fixes them.
const (
	defaultPullTimeoutSec   = 10
	maxPullTimeoutSec       = 600
	defaultMaxRecordsPerSec = 100_000
	minMaxRecordsPerSec     = 100
	maxMaxRecordsPerSec     = 10_000_000
	maxFlowSyncKeys         = 2
	// maxKeyFileSize bounds what is read of key_file: two lines of 64
	// digits are 130 bytes; anything much larger is not a key file.
	maxKeyFileSize = 4096
)

type rawFlowSync struct {
	Listen           val `toml:"listen"`
	Peers            val `toml:"peers"`
	KeyFile          val `toml:"key_file"`
	PullOnStart      val `toml:"pull_on_start"`
	PullTimeoutSec   val `toml:"pull_timeout_sec"`
	MaxRecordsPerSec val `toml:"max_records_per_sec"`
}

// flowSync converts [flow_sync]; cfg has its rules and [admin] already,
// whose addresses listen must not take.
func (c *converter) flowSync(r *rawFlowSync, cfg *Config) *FlowSync {
	const p = "flow_sync"
	f := &FlowSync{
		PullOnStart:      c.boolean(p+".pull_on_start", r.PullOnStart, true),
		PullTimeout:      seconds(c.integer(p+".pull_timeout_sec", r.PullTimeoutSec, defaultPullTimeoutSec, 1, maxPullTimeoutSec)),
		MaxRecordsPerSec: int(c.integer(p+".max_records_per_sec", r.MaxRecordsPerSec, defaultMaxRecordsPerSec, minMaxRecordsPerSec, maxMaxRecordsPerSec)),
	}
	if c.required(p+".listen", r.Listen) {
		if s, ok := c.text(p+".listen", r.Listen); ok {
			f.Listen = c.addrPort(p+".listen", s)
		}
	}
	if f.Listen.IsValid() {
		c.listenFree(p+".listen", f.Listen, cfg)
	}
	c.peers(p+".peers", r.Peers, f)
	if c.required(p+".key_file", r.KeyFile) {
		if s, ok := c.text(p+".key_file", r.KeyFile); ok {
			f.KeyFile = s
			f.Keys = c.keyFile(p+".key_file", s, cfg.Dataplane.User)
		}
	}
	return f
}

// addrPort parses "10.0.0.5:7300" or "[fd00::5]:7300": an address of one
// host (as hostAddr takes) and a port other than 0. Names are not taken:
// records are accepted by their source address, which must be a peer's.
func (c *converter) addrPort(path, s string) netip.AddrPort {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		c.add(path, "%q is not an IP address with a port, like 10.0.0.5:7300 or [fd00::5]:7300", s)
		return netip.AddrPort{}
	}
	if ap.Port() == 0 {
		c.add(path, "%q: port 0 is not a port to send to", s)
		return netip.AddrPort{}
	}
	if !c.hostAddr(path, ap.Addr().String()).IsValid() {
		return netip.AddrPort{}
	}
	return ap
}

// listenFree reports a listen address that is a VIP (its packets go to the
// XDP program, not to the host's sockets) or admin.listen's (one of the
// two could not bind).
func (c *converter) listenFree(path string, ap netip.AddrPort, cfg *Config) {
	for i, r := range cfg.Rules {
		if r.VIP == ap.Addr() {
			c.add(path, "%s is the VIP of forwarding_rule[%d]; listen on an address of this instance", ap.Addr(), i)
			return
		}
	}
	if a, err := netip.ParseAddrPort(cfg.Admin.Listen); err == nil && a.Port() == ap.Port() &&
		(a.Addr() == ap.Addr() || a.Addr().IsUnspecified()) {
		c.add(path, "%s: port %d is admin.listen's (%s) too", ap, ap.Port(), cfg.Admin.Listen)
	}
}

// peers converts flow_sync.peers into f.Peers: distinct, of listen's
// family (one socket sends to all), without listen itself (so every
// instance can share one file), and at least one left.
func (c *converter) peers(path string, v val, f *FlowSync) {
	if !c.required(path, v) {
		return
	}
	elems, ok := c.list(path, v)
	if !ok {
		return
	}
	seen := make(map[netip.AddrPort]int, len(elems))
	self, bad := false, false
	for i, e := range elems {
		ep := c.index(path, i)
		s, ok := c.text(ep, val{v: e, set: true})
		if !ok {
			bad = true
			continue
		}
		ap := c.addrPort(ep, s)
		if !ap.IsValid() {
			bad = true
			continue
		}
		if j, dup := seen[ap]; dup {
			c.add(ep, "%s is already listed at %s[%d]", ap, path, j)
			bad = true
			continue
		}
		seen[ap] = i
		if ap == f.Listen {
			self = true // this instance: ignored
			continue
		}
		if f.Listen.IsValid() && ap.Addr().Is4() != f.Listen.Addr().Is4() {
			c.add(ep, "%s is not of the family of flow_sync.listen %s: the one socket there sends to every peer", ap, f.Listen)
			bad = true
			continue
		}
		f.Peers = append(f.Peers, ap)
	}
	if len(f.Peers) == 0 && !bad {
		if self {
			c.add(path, "lists no peer but this instance (listen %s): list the other instances", f.Listen)
		} else {
			c.add(path, "lists no peer: list the other instances")
		}
	}
}

// keyFile reads the keys of key_file: one or two lines of 64 hex digits
// (32 bytes each), different. Messages never quote the file's content.
func (c *converter) keyFile(path, name, runAs string) [][32]byte {
	data, ok := c.secretFile(path, name, runAs, "one or two lines of 64 hex digits")
	if !ok {
		return nil
	}
	var keys [][32]byte
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var k [32]byte
		if len(line) != 2*len(k) {
			c.add(path, "%s line %d has %d characters, not 64 hex digits (32 bytes)", name, i+1, len(line))
			return nil
		}
		if _, err := hex.Decode(k[:], line); err != nil {
			c.add(path, "%s line %d is not 64 hex digits (32 bytes)", name, i+1)
			return nil
		}
		if slices.Contains(keys, k) {
			c.add(path, "%s line %d repeats the key before it: the two keys of a rollover differ", name, i+1)
			return nil
		}
		keys = append(keys, k)
	}
	switch {
	case len(keys) == 0:
		c.add(path, "%s has no key: one line of 64 hex digits (32 bytes) is needed", name)
		return nil
	case len(keys) > maxFlowSyncKeys:
		c.add(path, "%s has %d keys; at most %d (the one sent and one accepted during a rollover)", name, len(keys), maxFlowSyncKeys)
		return nil
	}
	return keys
}

// secretFile reads a file that holds a key. It is a secret: a regular
// file that neither group nor others may read or write, owned by root or
// by the user that loads it or that xlb runs as (dataplane.user, which
// reads it again on every reload); loaded by root for root, it must be
// root's; at most maxKeyFileSize bytes. shape says what the file should
// hold, for the message about a file too large. Messages never quote the
// file's content.
func (c *converter) secretFile(path, name, runAs, shape string) ([]byte, bool) {
	if !filepath.IsAbs(name) {
		c.add(path, "%q is not an absolute path", name)
		return nil, false
	}
	f, err := os.Open(name)
	if err != nil {
		c.add(path, "%v", err)
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		c.add(path, "%v", err)
		return nil, false
	}
	if !fi.Mode().IsRegular() {
		c.add(path, "%s is not a regular file (%s)", name, fi.Mode().Type())
		return nil, false
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		c.add(path, "%s is mode %04o: a key must be readable by its owner only (chmod 0600 it)", name, perm)
		return nil, false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if owners := keyOwners(runAs); !slices.Contains(owners, int(st.Uid)) {
			c.add(path, "%s is owned by uid %d; a key must be owned by %s", name, st.Uid, ownerNames(owners))
			return nil, false
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		c.add(path, "%v", err)
		return nil, false
	}
	if len(data) > maxKeyFileSize {
		c.add(path, "%s is larger than %d bytes: not a key file (%s)", name, maxKeyFileSize, shape)
		return nil, false
	}
	return data, true
}

// keyOwners are the uids a key file may belong to: root, and the user
// loading it or the one xlb runs as (dataplane.user) when not root.
func keyOwners(runAs string) []int {
	owners := []int{0}
	if uid := os.Geteuid(); uid != 0 {
		owners = append(owners, uid)
	}
	if runAs == "" {
		return owners
	}
	uid, err := strconv.ParseUint(runAs, 10, 32)
	if err != nil {
		u, lerr := user.Lookup(runAs)
		if lerr != nil {
			return owners // an unknown user stops `xlb run` at start
		}
		if uid, err = strconv.ParseUint(u.Uid, 10, 32); err != nil {
			return owners
		}
	}
	if !slices.Contains(owners, int(uid)) {
		owners = append(owners, int(uid))
	}
	return owners
}

func ownerNames(uids []int) string {
	if len(uids) == 1 {
		return "root"
	}
	s := "root"
	for i, u := range uids[1:] {
		if i == len(uids)-2 {
			s += " or"
		} else {
			s += ","
		}
		s += fmt.Sprintf(" uid %d", u)
	}
	return s
}

// FlowSyncRestartFields names the [flow_sync] settings that differ between
// old and cfg and that only a restart applies: "flow_sync" when the
// section is added or removed, "flow_sync.listen" (the sockets are bound
// once). Nil means a reload applies the change: peers, keys and
// max_records_per_sec (the syncer takes them), pull_on_start and
// pull_timeout_sec (read only at start: the next one uses them).
func FlowSyncRestartFields(old, cfg *FlowSync) []string {
	switch {
	case old == nil && cfg == nil:
		return nil
	case old == nil || cfg == nil:
		return []string{"flow_sync"}
	}
	if old.Listen != cfg.Listen {
		return []string{"flow_sync.listen"}
	}
	return nil
}
