//go:build unix

package main

import "syscall"

func sighup(pid int) error { return syscall.Kill(pid, syscall.SIGHUP) }
