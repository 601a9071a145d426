// Package afxdp is xlb's AF_XDP socket and ring layer, on golang.org/x/sys/unix.
//
// One Socket owns one UMEM (an mmapped area of NumFrames chunks of FrameSize
// bytes) and the four rings it shares with the kernel, bound to one rx queue
// of one interface:
//
//	free stack --refill--> fill ring --kernel writes a frame--> rx ring --Receive--> caller
//	caller --Transmit--> tx ring --kernel sends--> completion ring --Complete--> free stack
//	caller --Recycle--> free stack (dropped frames)
//
// Every chunk is, at any time, in exactly one of those places; the socket keeps
// a free-frame stack (O(1) push and pop) and one bit per chunk that says
// whether the caller holds it, so a frame that is transmitted or recycled
// twice is refused and counted, never handed to the kernel twice.
//
// Receive, Transmit, Complete, Recycle and Poll form the per-queue hot path:
// they take caller-owned batch slices, allocate nothing, and make a syscall
// only when the kernel asks for one through a ring's need-wakeup flag
// (XDP_USE_NEED_WAKEUP). They are meant for one goroutine (the queue's
// worker); Stats and Counters may be called from any goroutine, Close only
// once the worker has stopped. Nothing here panics on bad input: bad options
// are refused by New, bad descriptors are counted (see Counters) and errno
// values from the kernel are counted or returned.
//
// # Headroom and encapsulation
//
// Opts.Headroom is registered with the umem, so every received frame has at
// least that many free bytes in front of it in its chunk; current kernels
// add their XDP_PACKET_HEADROOM (256) on top (with the defaults, frames start
// 512 bytes into their chunk on Linux 6.18; the tests log it). A TX descriptor may start anywhere in a chunk, so a caller
// that encapsulates writes the outer headers in front of the frame and moves
// the descriptor back:
//
//	buf, off := s.Chunk(d.Addr)   // the whole chunk; the frame starts at off
//	copy(buf[off-n:off], outer)   // n <= off bytes of outer headers
//	d.Addr -= uint64(n)
//	d.Len += uint32(n)
//	s.Transmit(descs)
//
// FramePort does this for the decision engine: its frames are whole chunks
// (dataplane.Frame.Buf) with Off at the received frame, and Complete sends
// each forwarded frame from its final Off/Len.
//
// # Worker loop
//
//	port, _ := afxdp.NewFramePort(s, batch)
//	for running {
//		if decider.Poll(port, frames, now) > 0 { idle = 0; continue }
//		idle++
//		if idle < spins {
//			s.Poll(0) // a syscall only if the kernel set need-wakeup
//		} else {
//			s.Poll(time.Millisecond) // sleep until frames arrive, bounded
//		}
//	}
//
// The data path is aligned-chunk mode only (no XDP_UMEM_UNALIGNED_CHUNK_FLAG),
// one socket per UMEM (no XDP_SHARED_UMEM), and single-buffer frames (no
// XDP_USE_SG): a frame must fit its chunk.
package afxdp
