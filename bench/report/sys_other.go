//go:build !linux

package report

import "os"

func kernelRelease() string      { return "" }
func isTerminal(f *os.File) bool { return false }
func termWidth(f *os.File) int   { return 80 }
