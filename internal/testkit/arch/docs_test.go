package arch

import (
	"bytes"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the module's directory, from this package's.
const root = "../../.."

// statesConcurrency is how a doc comment says whether a type may be used
// from many goroutines.
var statesConcurrency = regexp.MustCompile(`(?i)concurrent|goroutine|safe for|read only`)

// TestExportedTypesStateConcurrency fails when an exported type under
// pkg/ does not say, in its doc comment, whether it is safe for
// concurrent use (as golang.org/x/time/rate's types do).
func TestExportedTypesStateConcurrency(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(root, "pkg", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no packages under pkg/: %v", err)
	}
	for _, dir := range dirs {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for _, typ := range doc.New(p, dir, 0).Types {
				if !statesConcurrency.MatchString(typ.Doc) {
					t.Errorf("%s: the doc comment of %s.%s does not say whether it is safe for concurrent use",
						fset.Position(typ.Decl.Pos()), p.Name, typ.Name)
				}
			}
		}
	}
}

// maxLines bounds a source file outside tests: past it, a file holds more
// than one idea and should be split where the ideas part.
const maxLines = 400

func TestFileLength(t *testing.T) {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			t.Errorf("%s has %d lines, over %d: split it where its ideas part", path, n, maxLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
