package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"xlb/config"
	"xlb/controlplane/appliance"
)

// cmdRun is `xlb run -c FILE [--log-level LEVEL] [--log-format F] [--pidfile FILE] [--keep-privileges]`:
// validate, then hand over to the appliance until SIGTERM or SIGINT; SIGHUP
// reloads the file (X2) once the appliance is up (one that comes earlier
// waits). The pid file, when asked for, is what `xlb reload --pidfile`
// reads; it is removed on a clean exit. Errors before the appliance starts
// logging (bad file, no privileges, no interface) come back as one line for
// main to print; once running, everything goes through the logger. Once
// started it drops every capability but those it needs (and becomes
// dataplane.user); where that fails it stops, unless --keep-privileges.
func cmdRun(args []string, stderr io.Writer) error {
	fs := newFlags("run")
	path := fs.String("c", "", "configuration file")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "json", "json (one object per line) or console (tab-separated, for a person or journald)")
	pidfile := fs.String("pidfile", "", "write the process id to FILE")
	keepPrivs := fs.Bool("keep-privileges", false, "keep every capability xlb was started with (it drops all but CAP_NET_ADMIN once started, and stops where it cannot)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("xlb run: -c FILE is required (%w)", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb run: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	lvl, err := zapcore.ParseLevel(*level)
	if err != nil || lvl < zapcore.DebugLevel || lvl > zapcore.ErrorLevel {
		return fmt.Errorf("xlb run: --log-level %q: want debug, info, warn or error (%w)", *level, errUsage)
	}
	if *format != "json" && *format != "console" {
		return fmt.Errorf("xlb run: --log-format %q: want json or console (%w)", *format, errUsage)
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	log := newLogger(stderr, lvl, *format)
	defer func() { _ = log.Sync() }()
	app, err := appliance.New(cfg, log)
	if err != nil {
		return err
	}
	if *keepPrivs {
		app.KeepPrivileges()
	}
	// From here on a SIGHUP reloads instead of ending the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if *pidfile != "" {
		remove, err := appliance.WritePidFile(*pidfile)
		if err != nil {
			return fmt.Errorf("xlb run: --pidfile: %w", err)
		}
		defer remove()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Under systemd (Type=notify): readiness, status line, watchdog.
	svc, stopSvc, err := newService(app, log)
	if err != nil {
		log.Warn("not telling systemd", zap.Error(err))
	}
	defer stopSvc()
	// Every reload, SIGHUP's or the admin socket's, is bracketed for
	// systemd with RELOADING=1 and READY=1 (nothing without it).
	app.OnReload(svc.reloading, svc.reloaded)
	if svc != nil {
		svcCtx, cancel := context.WithCancel(ctx)
		svcDone := make(chan struct{})
		go func() { svc.run(svcCtx); close(svcDone) }()
		defer func() { cancel(); <-svcDone }()
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	ready, hups := app.Ready(), (<-chan os.Signal)(nil)
	for {
		select {
		case <-ready:
			ready, hups = nil, hup
		case <-hups:
			log.Info("SIGHUP: reloading", zap.String("file", cfg.Path))
			_ = app.ReloadFile() // it logs and counts its errors
		case err := <-done:
			if err != nil {
				return fmt.Errorf("xlb run: %w", err)
			}
			return nil
		}
	}
}

// newLogger logs to w, in format "json" (zap's production encoding, ISO
// 8601 times: what a log shipper wants from an appliance) or "console"
// (the same fields, tab-separated, the level in capitals: for a person at
// a terminal or in journalctl).
func newLogger(w io.Writer, level zapcore.Level, format string) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	sink := zapcore.AddSync(w)
	if f, ok := w.(*os.File); ok {
		sink = zapcore.Lock(f)
	}
	encoder := zapcore.NewJSONEncoder(enc)
	if format == "console" {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	core := zapcore.NewCore(encoder, sink, level)
	return zap.New(core, zap.ErrorOutput(sink)).Named("xlb")
}
