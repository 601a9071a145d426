package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// cmdVersion is `xlb version`: the module version, the commit it was
// built from (and whether the tree had uncommitted changes) and the Go
// version, from what the Go toolchain stamped into the binary.
func cmdVersion(args []string, stdout io.Writer) error {
	fs := newFlags("version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb version: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	bi, _ := debug.ReadBuildInfo() // nil without module support: versionText says "unknown"
	fmt.Fprint(stdout, versionText(bi))
	return nil
}

// buildCommit and buildModified are set by `make build` with -ldflags -X
// (the commit, and "true" when the tree had changes): the fallback for
// when the toolchain stamps no vcs.revision, which it does not in a git
// worktree or with -buildvcs=false.
var buildCommit, buildModified string

// versionText formats the build information: `go build` inside a git
// checkout stamps vcs.revision, vcs.time and vcs.modified; without them,
// what make stamped (buildCommit); a build with neither (go test, a
// source tarball) says so.
func versionText(bi *debug.BuildInfo) string {
	version, goVersion := "unknown", runtime.Version()
	settings := map[string]string{}
	if bi != nil {
		version = bi.Main.Version
		if version == "" {
			version = "unknown"
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	commit := "unknown (built without version control information)"
	if settings["vcs.revision"] == "" && buildCommit != "" {
		settings["vcs.revision"], settings["vcs.modified"] = buildCommit, buildModified
	}
	if rev := settings["vcs.revision"]; rev != "" {
		commit = rev
		if t := settings["vcs.time"]; t != "" {
			commit += " (" + t + ")"
		}
		if settings["vcs.modified"] == "true" {
			commit += ", with uncommitted changes"
		}
	}
	return fmt.Sprintf("xlb %s\ncommit %s\ngo %s %s/%s\n", version, commit, goVersion, runtime.GOOS, runtime.GOARCH)
}
