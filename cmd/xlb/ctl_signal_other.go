//go:build !unix

package main

import "errors"

func sighup(int) error { return errors.New("signals need a Unix system") }
