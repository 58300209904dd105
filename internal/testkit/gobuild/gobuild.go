// Package gobuild builds a repository's commands for tests that run the
// real binaries, with the build tags of the test itself: `go test -tags
// vtprotobuf` (make test) runs daemons built as make and the Dockerfile
// build them, and a test run without tags runs daemons without them.
package gobuild

import (
	"os/exec"
	"runtime/debug"
)

// Tags are the -tags the running binary was built with, "" for none.
func Tags() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			return s.Value
		}
	}
	return ""
}

// Command is `go build` of pkgs into the directory out (which ends in a
// path separator, so each binary is named after its package), with Tags.
func Command(out string, pkgs ...string) *exec.Cmd {
	args := []string{"build", "-o", out}
	if t := Tags(); t != "" {
		args = append(args, "-tags", t)
	}
	return exec.Command("go", append(args, pkgs...)...)
}
