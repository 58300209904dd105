//go:build soak

package rlqs

// soak: the long tests run too (make soak).
const soak = true
