package afxdp

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"xlb/internal/nettest"
)

// redirectProg is the smallest XDP program that feeds AF_XDP sockets:
// redirect_map(xsks, ctx->rx_queue_index, XDP_PASS), so a queue without a
// socket passes frames to the kernel. The real program (dataplane/xdpprog)
// only redirects VIP traffic; this one is for this package's tests.
type redirectProg struct {
	xsks *ebpf.Map
	prog *ebpf.Program
}

const xdpPass = 2

func newRedirectProg(tb testing.TB) *redirectProg {
	tb.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		tb.Fatalf("removing the memlock limit: %v", err)
	}
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Name: "afxt_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 8})
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel lacks XSKMAP (AF_XDP): %v", err)
	}
	if err != nil {
		tb.Fatalf("creating XSKMAP: %v", err)
	}
	tb.Cleanup(func() { xsks.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "afxt_redirect",
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			// r2 = ctx->rx_queue_index (struct xdp_md offset 16)
			asm.LoadMem(asm.R2, asm.R1, 16, asm.Word),
			asm.LoadMapPtr(asm.R1, xsks.FD()),
			// The low bits of the flags are the action when the slot
			// is empty.
			asm.Mov.Imm(asm.R3, xdpPass),
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		tb.Fatalf("loading the XDP program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	return &redirectProg{xsks: xsks, prog: prog}
}

// attach attaches the program to ifindex inside ns with a bpf_link, in
// native (driver) or generic mode; detached at the end of the test.
func (r *redirectProg) attach(tb testing.TB, ns *nettest.NS, ifindex int, flags link.XDPAttachFlags) {
	tb.Helper()
	var l link.Link
	err := ns.Do(func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: r.prog, Interface: ifindex, Flags: flags})
		return err
	})
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel lacks XDP bpf_link attach: %v", err)
	}
	if err != nil {
		tb.Fatalf("attaching XDP (flags %v) to ifindex %d: %v", flags, ifindex, err)
	}
	tb.Cleanup(func() { l.Close() })
}

// register puts a socket into the XSKMAP at its queue.
func (r *redirectProg) register(tb testing.TB, s *Socket) {
	tb.Helper()
	if err := r.xsks.Put(uint32(s.Queue()), uint32(s.FD())); err != nil {
		tb.Fatalf("XSKMAP[%d] = fd %d: %v", s.Queue(), s.FD(), err)
	}
}
