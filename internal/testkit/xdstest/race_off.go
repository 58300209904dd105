//go:build !race

package xdstest

const raceEnabled = false
