// Package version holds kgen's version, set at link time with
// -ldflags "-X kgen.dev/kgen/internal/version.Version=v1.2.3".
package version

import "runtime/debug"

// Version is kgen's release version, or "dev" for a local build.
var Version = "dev"

// Commit returns the VCS revision the binary was built from, if Go recorded it.
func Commit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}
