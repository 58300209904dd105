package global

import (
	"embed"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// refundMarker divides an algorithm's Lua file: what precedes it is what
// deciding needs, what follows it the refund.
const refundMarker = "-- refund: only the refund script includes what follows.\n"

// script assembles one Lua script: the shared helpers (common.lua), one
// file per algorithm (lua/<name>.lua, its module), the ALGORITHMS table
// built from pkg/algorithm's kinds, so that Go and Lua agree on every
// kind's number, and the driver. Redis runs the whole body on every call,
// defining every function again, so a script carries only what its driver
// uses: the algorithms' refunds go into the refund script alone. An
// algorithm missing its Lua file or its marker is a build defect the tests
// catch at once.
func script(driver string, refunds bool) string {
	var b strings.Builder
	b.WriteString(mustRead("common.lua"))
	var table []string
	for _, k := range algorithm.Kinds() {
		decide, refund, ok := strings.Cut(mustRead(k.String()+".lua"), refundMarker)
		if !ok {
			panic("global: lua/" + k.String() + ".lua has no refund marker") // a build defect
		}
		b.WriteString("\n")
		b.WriteString(decide)
		if refunds {
			b.WriteString(refund)
		}
		table = append(table, fmt.Sprintf("[%d] = %s", k, k))
	}
	fmt.Fprintf(&b, "\nALGORITHMS = { %s }\n\n", strings.Join(table, ", "))
	b.WriteString(mustRead(driver))
	return b.String()
}

// decideSource is the Lua that decides requests' items, all or nothing.
func decideSource() string { return script("decide.lua", false) }

// refundSource is the Lua that gives back what a decide call took.
func refundSource() string { return script("refund.lua", true) }

func mustRead(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("global: embedded script missing: " + name) // a build defect, not a runtime condition
	}
	return string(src)
}
