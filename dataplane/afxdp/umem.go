package afxdp

import (
	"fmt"
	"math/bits"

	"golang.org/x/sys/unix"
)

// umem is the packet memory shared with the kernel, the stack of chunks
// nobody uses, and which chunks the caller holds.
type umem struct {
	mem       []byte
	frameSize uint64
	chunkMask uint64 // ^(frameSize-1): an address's chunk start
	shift     uint   // log2(frameSize): an address's chunk index

	// free is a stack of chunk addresses; free[:nfree] are usable.
	free  []uint64
	nfree uint32

	// held has one bit per chunk, set while the caller holds it (from
	// Receive until Transmit or Recycle).
	held []uint64
}

// newUmem maps numFrames chunks of frameSize bytes. mmap gives page-aligned,
// zeroed memory, so no chunk straddles a page more than it must.
func newUmem(numFrames, frameSize uint32) (umem, error) {
	size := int(numFrames) * int(frameSize)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return umem{}, fmt.Errorf("afxdp: mapping umem of %d bytes: %w", size, err)
	}
	u := umem{
		mem:       mem,
		frameSize: uint64(frameSize),
		chunkMask: ^(uint64(frameSize) - 1),
		shift:     uint(bits.TrailingZeros32(frameSize)),
		free:      make([]uint64, numFrames),
		held:      make([]uint64, (numFrames+63)/64),
	}
	// Pushed in reverse so the first pops hand out low addresses.
	for i := int(numFrames) - 1; i >= 0; i-- {
		u.free[u.nfree] = uint64(i) * u.frameSize
		u.nfree++
	}
	return u, nil
}

func (u *umem) unmap() error {
	if u.mem == nil {
		return nil
	}
	err := unix.Munmap(u.mem)
	u.mem = nil
	return err
}

func (u *umem) pop() (uint64, bool) {
	if u.nfree == 0 {
		return 0, false
	}
	u.nfree--
	return u.free[u.nfree], true
}

// push returns the chunk holding addr to the free stack; false if addr is
// outside the umem or the stack is already full (a chunk returned twice).
func (u *umem) push(addr uint64) bool {
	if addr >= uint64(len(u.mem)) || int(u.nfree) >= len(u.free) {
		return false
	}
	u.free[u.nfree] = addr & u.chunkMask
	u.nfree++
	return true
}

// fits reports whether [addr, addr+n) is a non-empty range inside one chunk.
func (u *umem) fits(addr uint64, n uint32) bool {
	return n > 0 && addr < uint64(len(u.mem)) && addr&^u.chunkMask+uint64(n) <= u.frameSize
}

func (u *umem) isHeld(addr uint64) bool {
	i := addr >> u.shift
	return u.held[i/64]&(1<<(i%64)) != 0
}

// take marks the chunk of an in-range addr as held by the caller; false if
// it already was.
func (u *umem) take(addr uint64) bool {
	i := addr >> u.shift
	w, b := &u.held[i/64], uint64(1)<<(i%64)
	if *w&b != 0 {
		return false
	}
	*w |= b
	return true
}

// give clears the held bit of an in-range addr's chunk; false if the caller
// did not hold it.
func (u *umem) give(addr uint64) bool {
	i := addr >> u.shift
	w, b := &u.held[i/64], uint64(1)<<(i%64)
	if *w&b == 0 {
		return false
	}
	*w &^= b
	return true
}

// release takes a frame back from the caller onto the free stack; false (and
// nothing changes) if addr is outside the umem or its chunk is not held.
func (u *umem) release(addr uint64) bool {
	if addr >= uint64(len(u.mem)) || !u.give(addr) {
		return false
	}
	return u.push(addr)
}

// chunk returns the whole chunk holding addr (len and cap FrameSize).
func (u *umem) chunk(addr uint64) []byte {
	c := addr & u.chunkMask
	return u.mem[c : c+u.frameSize : c+u.frameSize]
}
