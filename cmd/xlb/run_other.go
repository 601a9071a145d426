//go:build !linux

package main

import (
	"context"
	"errors"
	"os"

	"go.uber.org/zap"

	"xlb/config"
)

// runAppliance needs XDP and AF_XDP: Linux only. check, sim and explain
// work everywhere.
func runAppliance(context.Context, *config.Config, *zap.Logger, <-chan os.Signal) error {
	return errors.New("xlb run needs Linux (XDP and AF_XDP); check, sim and explain work here")
}
