package controlplane

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinDir returns the folder holding the control plane binaries: $KGEN_TOOLS_BIN
// if set, else whatever hack/tools.sh in the repository at root prints, which
// builds them first if they are not cached yet. With tools named
// ("kube-scheduler", "kwok"), hack/tools.sh builds only those, into the same
// folder.
func BinDir(root string, tools ...string) (string, error) {
	if dir := os.Getenv("KGEN_TOOLS_BIN"); dir != "" {
		return dir, nil
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), tools...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/tools.sh: %w: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}
