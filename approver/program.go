package approver

import (
	"fmt"
	"unicode/utf8"
)

// MaxShownProgram bounds a program's ID as a channel shows it, in bytes.
// The workflow refuses a ProgramID over 200 bytes, so a real ID is never
// cut; a longer one (a notice from elsewhere, a hostile caller) is.
const MaxShownProgram = 200

// ShownProgram is a program's ID cut to MaxShownProgram bytes at a
// character boundary, "…" marking the cut. It is not escaped: each
// channel escapes it as it escapes every other string.
func ShownProgram(id string) string {
	if len(id) <= MaxShownProgram {
		return id
	}
	cut := MaxShownProgram
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + "…"
}

// ProgramNote says which program made a call and at which line of its
// source: "from program <ID>, line <N>" (code mode, issue 27); "" for a
// call the agent made directly. Plain text, cut but not escaped, on one
// line only once the channel has made it visible (cell, VisibleLine).
func ProgramNote(program string, line int) string {
	if program == "" {
		return ""
	}
	return "from program " + ProgramWhere(program, line)
}

// ProgramWhere is ProgramNote without "from program ": "<ID>, line <N>"
// ("" for a direct call).
func ProgramWhere(program string, line int) string {
	switch {
	case program == "":
		return ""
	case line <= 0:
		return ShownProgram(program)
	}
	return fmt.Sprintf("%s, line %d", ShownProgram(program), line)
}
