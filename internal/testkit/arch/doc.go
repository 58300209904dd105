// Package arch holds the tests that keep the rules ARCHITECTURE.md states
// about the code as a whole: the package dependencies, the exported types'
// word on concurrency, and the length of a file. It has no code of its own.
package arch
