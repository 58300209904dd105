package global

import (
	"embed"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// script assembles one Lua script: the shared helpers (common.lua), one
// file per algorithm (lua/<name>.lua, its module), the ALGORITHMS table
// built from pkg/algorithm's kinds, so that Go and Lua agree on every
// kind's number, and the driver. An algorithm missing its Lua file is a
// build defect the tests catch at once.
func script(driver string) string {
	var b strings.Builder
	b.WriteString(mustRead("common.lua"))
	var table []string
	for _, k := range algorithm.Kinds() {
		b.WriteString("\n")
		b.WriteString(mustRead(k.String() + ".lua"))
		table = append(table, fmt.Sprintf("[%d] = %s", k, k))
	}
	fmt.Fprintf(&b, "\nALGORITHMS = { %s }\n\n", strings.Join(table, ", "))
	b.WriteString(mustRead(driver))
	return b.String()
}

// decideSource is the Lua that decides requests' items, all or nothing.
func decideSource() string { return script("decide.lua") }

// refundSource is the Lua that gives back what a decide call took.
func refundSource() string { return script("refund.lua") }

func mustRead(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("global: embedded script missing: " + name) // a build defect, not a runtime condition
	}
	return string(src)
}
