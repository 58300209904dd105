// Package arch holds the test that keeps sluice's package dependencies as
// ARCHITECTURE.md states them. It has no code of its own.
package arch
