//go:build !race

package bwrap

const raceDetector = false
