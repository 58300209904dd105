package gobuild

import (
	"slices"
	"testing"
)

func TestCommandCarriesTheTestsTags(t *testing.T) {
	cmd := Command("/tmp/out/", "./cmd/server")
	i := slices.Index(cmd.Args, "-tags")
	switch tags := Tags(); {
	case tags == "" && i >= 0:
		t.Errorf("args %q carry -tags; the test was built without", cmd.Args)
	case tags != "" && (i < 0 || cmd.Args[i+1] != tags):
		t.Errorf("args %q; want -tags %s, the test's own", cmd.Args, tags)
	}
	if cmd.Args[len(cmd.Args)-1] != "./cmd/server" || cmd.Args[1] != "build" {
		t.Errorf("args %q", cmd.Args)
	}
}
