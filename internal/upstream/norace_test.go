//go:build !race

package upstream

const raceDetector = false
