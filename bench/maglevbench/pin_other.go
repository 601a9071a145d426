//go:build !linux

package maglevbench

// pinOneCPU cannot pin outside Linux; the goroutine stays locked to one
// OS thread.
func pinOneCPU() int { return -1 }
