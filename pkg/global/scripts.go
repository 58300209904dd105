package global

import (
	"embed"
	"strings"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// decideParts are concatenated into one script: the helpers and the
// algorithms are local functions the driver (decide.lua) calls.
var decideParts = []string{"common.lua", "token_bucket.lua", "window.lua", "sliding_log.lua", "dispatch.lua", "decide.lua"}

// decideSource is the Lua that decides a request's items, all or nothing.
func decideSource() string {
	var b strings.Builder
	for _, name := range decideParts {
		b.WriteString(mustRead(name))
		b.WriteByte('\n')
	}
	return b.String()
}

func refundSource() string { return mustRead("refund.lua") }

func mustRead(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("global: embedded script missing: " + name) // a build defect, not a runtime condition
	}
	return string(src)
}
