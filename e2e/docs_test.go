package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEReference keeps README.md's flag and metric tables whole: every
// flag the two daemons define and every sluice_ metric the code registers
// is named there.
func TestREADMEReference(t *testing.T) {
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`(?m)^  (-[a-z][a-z0-9-]*)`)
	for _, bin := range []string{"server", "localfilter"} {
		var out bytes.Buffer
		cmd := exec.Command(filepath.Join(binaries.dir, bin), "-h")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s -h: %v\n%s", bin, err, out.String())
		}
		flags := flagLine.FindAllStringSubmatch(out.String(), -1)
		if len(flags) < 10 {
			t.Fatalf("%s -h lists %d flags; the parser is out of step with its output:\n%s", bin, len(flags), out.String())
		}
		for _, f := range flags {
			if !bytes.Contains(readme, []byte("`"+f[1]+"`")) {
				t.Errorf("README.md does not document %s's flag %s", bin, f[1])
			}
		}
	}
	metricName := regexp.MustCompile(`Name:\s*"(sluice_[a-z_]+)"`)
	seen := 0
	for _, dir := range []string{"cmd", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range metricName.FindAllSubmatch(src, -1) {
				seen++
				if !bytes.Contains(readme, []byte("`"+string(m[1])+"`")) {
					t.Errorf("README.md does not document the metric %s (%s)", m[1], path)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen < 20 {
		t.Fatalf("found %d metric definitions; the pattern is out of step with the code", seen)
	}
}
