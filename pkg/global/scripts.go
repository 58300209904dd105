package global

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
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

// decideLibrary is decideSource as a Redis function library (Redis 7
// FUNCTION LOAD), and the name of its function: the helpers and the
// algorithms are defined once, when the library loads, where a script
// defines them again on every call; each call runs the driver alone, with
// the call's own tables (common.lua's values start empty). Library and
// function are named by the source's digest, so servers of different
// versions on one Redis each call their own.
func decideLibrary() (src, function string) {
	body := script("decide.lua", false)
	sum := sha1.Sum([]byte(body))
	tag := hex.EncodeToString(sum[:8])
	function = "sluice_decide_" + tag
	helpers, driver, ok := strings.Cut(body, driverMarker)
	if !ok {
		panic("global: lua/decide.lua has no driver marker") // a build defect
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=sluice_%s\n", tag)
	b.WriteString(helpers)
	b.WriteString("\nlocal function decide_call(KEYS, ARGV)\nvalues = {}\n")
	b.WriteString(driver)
	fmt.Fprintf(&b, "\nend\nredis.register_function('%s', decide_call)\n", function)
	return b.String(), function
}

// driverMarker starts decide.lua's driver: what each call runs; what
// precedes it (and the helpers and algorithms before the file) is defined
// once in a function library.
const driverMarker = "-- driver: each call runs what follows.\n"

// refundSource is the Lua that gives back what a decide call took.
func refundSource() string { return script("refund.lua", true) }

func mustRead(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("global: embedded script missing: " + name) // a build defect, not a runtime condition
	}
	return string(src)
}
