package bpfasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"xlb/dataplane/packet"
	"xlb/internal/nettest"
)

// TestMain fails the run when a test leaves a program open.
func TestMain(m *testing.M) { os.Exit(nettest.MainCheckFDs(m)) }

// exitOK is the exit a test program takes when it falls out of the blocks.
const exitOK = "ok"

// result is where a test program ended: the exit label, and there r9's
// offset in the frame and the value the test reads out (ok only).
type result struct {
	exit string
	off  int
	val  uint16
}

// loadBlocks assembles a test program: Ethernet, then emit's blocks. Falling
// out of them returns 1<<24 | r9's offset<<16 | the low 16 bits of the
// register val; a jump to exits[i] returns (i+2)<<24 | r9's offset<<16.
// exits must hold "short" (Ethernet's) and only labels the blocks jump
// to: the verifier rejects unreachable code.
func loadBlocks(t *testing.T, emit func(b *Builder), val asm.Register, exits ...string) *ebpf.Program {
	t.Helper()
	nettest.RequireRoot(t)
	b := &Builder{}
	b.Ethernet("short")
	emit(b)
	ret := func(code int32, v asm.Register) {
		b.Emit(
			asm.Mov.Reg(asm.R0, asm.R9),
			asm.Sub.Reg(asm.R0, asm.R7), // r9's offset (root may subtract pointers)
			asm.LSh.Imm(asm.R0, 16),
			asm.Add.Imm(asm.R0, code<<24),
		)
		if v != asm.R0 {
			b.Emit(
				asm.And.Imm(v, 0xffff),
				asm.Or.Reg(asm.R0, v),
			)
		}
		b.Emit(asm.Return())
	}
	b.Mark(exitOK)
	ret(1, val)
	for i, e := range exits {
		b.Mark(e)
		ret(int32(i+2), asm.R0)
	}
	insns, err := b.Instructions()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "bpfasm_test", Type: ebpf.XDP, License: "Dual MIT/GPL", Instructions: insns})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks BPF/XDP support: %v", err)
	}
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// run runs prog once on frame (BPF_PROG_TEST_RUN) and decodes its result.
func run(t *testing.T, prog *ebpf.Program, frame []byte, exits ...string) result {
	t.Helper()
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("Program.Run: %v", err)
	}
	r := result{off: int(ret >> 16 & 0xff), val: uint16(ret)}
	switch code := int(ret >> 24); {
	case code == 1:
		r.exit = exitOK
	case code >= 2 && code-2 < len(exits):
		r.exit, r.val = exits[code-2], 0
	default:
		t.Fatalf("return value %#x: no exit", ret)
	}
	return r
}

// ether is an Ethernet header with the EtherTypes given (tags' TPIDs, then
// the payload's), each tag's TCI 0x0123, then payload.
func ether(payload []byte, types ...uint16) []byte {
	f := make([]byte, 12, 64)
	for i, et := range types {
		f = binary.BigEndian.AppendUint16(f, et)
		if i < len(types)-1 {
			f = binary.BigEndian.AppendUint16(f, 0x0123)
		}
	}
	return append(f, payload...)
}

// ipv4 is an IPv4 header: first byte vihl (version, IHL), total length
// tot, flags and fragment offset frag; as long as the IHL says (at least
// 20 bytes), then payload.
func ipv4(vihl byte, tot, frag uint16, payload int) []byte {
	n := max(int(vihl&0x0f)*4, packet.IPv4MinLen)
	h := make([]byte, n+payload)
	h[0] = vihl
	binary.BigEndian.PutUint16(h[2:], tot)
	binary.BigEndian.PutUint16(h[6:], frag)
	h[8], h[9] = 64, byte(packet.ProtoUDP)
	return h
}

func TestVLAN(t *testing.T) {
	exits := []string{"short"}
	both := []uint16{packet.EtherTypeVLAN, packet.EtherTypeQinQ}
	const (
		q, ad, v4, arp = packet.EtherTypeVLAN, packet.EtherTypeQinQ, packet.EtherTypeIPv4, packet.EtherTypeARP
	)
	ip := ipv4(0x45, 20, 0, 0)
	for _, c := range []struct {
		name  string
		tags  int
		tpids []uint16
		frame []byte
		want  result
	}{
		{"untagged", 2, both, ether(ip, v4), result{exitOK, 14, v4}},
		{"ARP", 2, both, ether(ip, arp), result{exitOK, 14, arp}},
		{"802.1Q", 2, both, ether(ip, q, v4), result{exitOK, 18, v4}},
		{"802.1ad", 2, both, ether(ip, ad, v4), result{exitOK, 18, v4}},
		{"802.1ad+802.1Q", 2, both, ether(ip, ad, q, v4), result{exitOK, 22, v4}},
		{"802.1Q+802.1Q", 2, both, ether(ip, q, q, v4), result{exitOK, 22, v4}},
		// The third tag is not walked: r2 is its TPID.
		{"three tags", 2, both, ether(ip, q, q, q, v4), result{exitOK, 22, q}},
		{"tag cut short", 2, both, ether(nil, q)[:14+3], result{exit: "short", off: 14}},
		{"second tag cut short", 2, both, ether(nil, ad, q)[:18+3], result{exit: "short", off: 18}},
		// decap's walk: one 802.1Q tag, nothing else.
		{"one tag", 1, []uint16{q}, ether(ip, q, v4), result{exitOK, 18, v4}},
		{"one tag, 802.1ad", 1, []uint16{q}, ether(ip, ad, v4), result{exitOK, 14, ad}},
		{"one tag, two there", 1, []uint16{q}, ether(ip, q, q, v4), result{exitOK, 18, q}},
		{"one tag, cut short", 1, []uint16{q}, ether(nil, q)[:14+2], result{exit: "short", off: 14}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := loadBlocks(t, func(b *Builder) {
				b.VLAN(c.tags, c.tpids, "short")
				b.Emit(asm.HostTo(asm.BE, asm.R2, asm.Half))
			}, asm.R2, exits...)
			if got := run(t, prog, c.frame, exits...); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestVLAN_NoTPIDs(t *testing.T) {
	b := &Builder{}
	b.VLAN(1, nil, "short")
	if _, err := b.Instructions(); err == nil {
		t.Error("a VLAN walk without TPIDs not reported")
	}
}

func TestEtherTypeIP(t *testing.T) {
	exits := []string{"short", "ipv4", "ipv6"}
	// Other EtherTypes go to the next instruction, which is exitOK's.
	prog := loadBlocks(t, func(b *Builder) { b.EtherTypeIP("ipv4", "ipv6", exitOK) }, asm.R0, exits...)
	for et, want := range map[uint16]string{
		packet.EtherTypeIPv4: "ipv4",
		packet.EtherTypeIPv6: "ipv6",
		packet.EtherTypeARP:  exitOK,
		packet.EtherTypeVLAN: exitOK,
		0x0008:               exitOK, // IPv4's, byte-swapped
	} {
		t.Run(fmt.Sprintf("%#04x", et), func(t *testing.T) {
			if got := run(t, prog, ether(make([]byte, 40), et), exits...); got.exit != want {
				t.Errorf("EtherType %#04x: exit %s, want %s", et, got.exit, want)
			}
		})
	}
}

// TestIPv4Header: version and IHL only; the total length is IPv4Length's.
func TestIPv4Header(t *testing.T) {
	exits := []string{"short", "bad"}
	prog := loadBlocks(t, func(b *Builder) {
		b.Need(packet.IPv4MinLen, "short")
		b.IPv4Header("bad")
	}, asm.R1, exits...)
	for _, c := range []struct {
		name string
		ip   []byte
		want result
	}{
		{"no options", ipv4(0x45, 20, 0, 0), result{exitOK, 14, 20}},
		{"options", ipv4(0x46, 24, 0, 0), result{exitOK, 14, 24}},
		{"IHL 15", ipv4(0x4f, 60, 0, 0), result{exitOK, 14, 60}},
		{"total length past the frame", ipv4(0x45, 0xffff, 0, 0), result{exitOK, 14, 20}},
		{"fragment", ipv4(0x45, 20, 0x2000, 0), result{exitOK, 14, 20}},
		{"version 6", ipv4(0x65, 20, 0, 0), result{exit: "bad", off: 14}},
		{"version 0", ipv4(0x05, 20, 0, 0), result{exit: "bad", off: 14}},
		{"IHL 4", ipv4(0x44, 20, 0, 0), result{exit: "bad", off: 14}},
		{"IHL 0", ipv4(0x40, 20, 0, 0), result{exit: "bad", off: 14}},
		{"truncated", ipv4(0x45, 20, 0, 0)[:19], result{exit: "short", off: 14}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, prog, ether(c.ip, packet.EtherTypeIPv4), exits...); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestIPv4Length: the checks xdpprog and decap make, behind one tag.
func TestIPv4Length(t *testing.T) {
	exits := []string{"short", "bad"}
	prog := loadBlocks(t, func(b *Builder) {
		b.VLAN(1, []uint16{packet.EtherTypeVLAN}, "short")
		b.Need(packet.IPv4MinLen, "short")
		b.IPv4Header("bad")
		b.IPv4Length("bad")
	}, asm.R2, exits...)
	for _, c := range []struct {
		name string
		ip   []byte
		want result
	}{
		{"no options", ipv4(0x45, 28, 0, 8), result{exitOK, 18, 28}},
		{"options", ipv4(0x46, 28, 0, 4), result{exitOK, 18, 28}},
		{"IHL 15, no payload", ipv4(0x4f, 60, 0, 0), result{exitOK, 18, 60}},
		{"Ethernet padding", ipv4(0x45, 28, 0, 26), result{exitOK, 18, 28}},
		{"total length past the frame", ipv4(0x45, 29, 0, 8), result{exit: "bad", off: 18}},
		{"total length under the header", ipv4(0x46, 20, 0, 4), result{exit: "bad", off: 18}},
		{"total length 0", ipv4(0x45, 0, 0, 8), result{exit: "bad", off: 18}},
		{"bad IHL still caught", ipv4(0x43, 28, 0, 8), result{exit: "bad", off: 18}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, prog, ether(c.ip, packet.EtherTypeVLAN, packet.EtherTypeIPv4), exits...); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestIPv4Fragment(t *testing.T) {
	exits := []string{"short", "frag"}
	prog := loadBlocks(t, func(b *Builder) {
		b.Need(packet.IPv4MinLen, "short")
		b.IPv4Fragment("frag")
	}, asm.R0, exits...)
	for _, c := range []struct {
		name string
		frag uint16 // flags and offset
		want string
	}{
		{"whole", 0, exitOK},
		{"DF", 0x4000, exitOK},
		{"reserved bit", 0x8000, exitOK},
		{"MF", 0x2000, "frag"},
		{"MF and DF", 0x6000, "frag"},
		{"offset 1", 0x0001, "frag"},
		{"last offset", 0x1fff, "frag"},
		{"offset 256", 0x0100, "frag"}, // a byte order slip would miss it
		{"last fragment with DF", 0x4010, "frag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, prog, ether(ipv4(0x45, 20, c.frag, 0), packet.EtherTypeIPv4), exits...); got.exit != c.want {
				t.Errorf("flags/offset %#04x: exit %s, want %s", c.frag, got.exit, c.want)
			}
		})
	}
}

func TestIPVersion(t *testing.T) {
	exits := []string{"short", "bad"}
	for _, v := range []int32{4, 6} {
		prog := loadBlocks(t, func(b *Builder) {
			b.Need(1, "short")
			b.IPVersion(v, "bad")
		}, asm.R0, exits...)
		for _, c := range []struct {
			first byte
			want  string
		}{{0x45, "4"}, {0x4f, "4"}, {0x60, "6"}, {0x6f, "6"}, {0x00, ""}, {0x54, ""}, {0xf6, ""}} {
			want := "bad"
			if c.want == fmt.Sprint(v) {
				want = exitOK
			}
			if got := run(t, prog, ether([]byte{c.first}, packet.EtherTypeIPv4), exits...); got.exit != want {
				t.Errorf("IPVersion(%d) on %#02x: exit %s, want %s", v, c.first, got.exit, want)
			}
		}
	}
}

func TestIPv6Length(t *testing.T) {
	exits := []string{"short", "bad"}
	prog := loadBlocks(t, func(b *Builder) {
		b.Need(packet.IPv6FixedLen, "short")
		b.IPv6Length("bad")
	}, asm.R2, exits...)
	ip6 := func(payLen uint16, payload int) []byte {
		h := make([]byte, packet.IPv6FixedLen+payload)
		h[0] = 0x60
		binary.BigEndian.PutUint16(h[4:], payLen)
		return h
	}
	for _, c := range []struct {
		name string
		ip   []byte
		want result
	}{
		{"no payload", ip6(0, 0), result{exitOK, 14, 40}},
		{"payload", ip6(8, 8), result{exitOK, 14, 48}},
		{"Ethernet padding", ip6(8, 20), result{exitOK, 14, 48}},
		{"payload past the frame", ip6(9, 8), result{exit: "bad", off: 14}},
		{"payload 256, 1 in the frame", ip6(256, 1), result{exit: "bad", off: 14}},
		{"truncated", ip6(0, 0)[:39], result{exit: "short", off: 14}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, prog, ether(c.ip, packet.EtherTypeIPv6), exits...); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
