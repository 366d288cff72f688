package timeline

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
)

// programEvents are a program's start (with its source), its calls with
// their events one level deeper, the requests to stop it, and its end.
func programEvents(tl *Timeline, p *Program) []event {
	pf := func(f map[string]any) map[string]any { f["program"] = p.ID; return f }
	f := pf(map[string]any{"principal": p.Principal, "source": p.Source, "tools": p.Tools, "atomic": p.Atomic,
		"max_calls": p.Limits.MaxCalls, "max_steps": p.Limits.MaxSteps, "timeout": p.Limits.Timeout})
	var what []string
	if p.Atomic {
		what = append(what, "atomic")
	}
	if len(p.Tools) > 0 {
		what = append(what, "tools "+strings.Join(p.Tools, ", "))
	}
	what = append(what, fmt.Sprintf("limits: %d calls, %d steps, timeout %s", p.Limits.MaxCalls, p.Limits.MaxSteps, p.Limits.Timeout))
	text := fmt.Sprintf("program %s by %s (%s)", p.ID, p.Principal, strings.Join(what, "; "))
	if p.Repeat {
		f["repeat"] = true
		text += " (a repeat of a program that had ended: answered with its recorded result)"
	}
	text += "\n" + numbered(p.Source)
	out := []event{{at: p.Requested, typ: EventProgramStarted, run: p.Run, fields: f, text: text}}

	var blocks []block
	for _, id := range p.Calls {
		c := tl.Call(id)
		if c == nil {
			continue
		}
		evs := callEvents(tl, c)
		for i := range evs {
			evs[i].depth++
		}
		blocks = append(blocks, block{at: c.Requested, events: evs})
	}
	for _, s := range p.Stops {
		text := "stop requested"
		if s.By != "" {
			text += " by " + s.By
		}
		if s.Reason != "" {
			text += ": " + s.Reason
		}
		blocks = append(blocks, block{at: s.At, events: []event{{at: s.At, depth: 1, typ: EventProgramStopRequested, run: runAt(tl, s.At),
			fields: pf(map[string]any{"by": s.By, "reason": s.Reason}), text: text}}})
	}
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i].at.Before(blocks[j].at) })
	for _, b := range blocks {
		out = append(out, b.events...)
	}
	if p.Finished == nil {
		last := out[len(out)-1].at
		for _, e := range out {
			if e.at.After(last) {
				last = e.at
			}
		}
		return append(out, event{at: last, depth: 1, typ: EventProgramRunning, run: runAt(tl, last),
			fields: pf(map[string]any{"calls": len(p.Calls)}),
			text:   fmt.Sprintf("program %s still running (%s so far)", p.ID, plural(len(p.Calls), "call"))})
	}
	return append(out, programEnd(tl, p))
}

// programEnd is how the program ended.
func programEnd(tl *Timeline, p *Program) event {
	f := map[string]any{"program": p.ID, "outcome": p.Outcome, "calls": len(p.Calls), "steps": p.Steps, "duration_ms": p.DurationMS}
	text := "program " + p.ID + " ended: " + p.Outcome
	if p.Line > 0 {
		f["line"] = p.Line
		text += fmt.Sprintf(" at line %d", p.Line)
	}
	text += fmt.Sprintf(" after %s and %s in %s", plural(len(p.Calls), "call"), plural(int(p.Steps), "step"), time.Duration(p.DurationMS)*time.Millisecond)
	if p.Error != "" {
		f["error"] = p.Error
		text += ": " + oneLine(p.Error)
	}
	if len(p.Result) > 0 {
		f["result"] = p.Result
		text += "; result " + short(p.Result)
	}
	if p.Output != "" {
		f["output"] = p.Output
		text += "; printed " + fmt.Sprintf("%q", clip(p.Output, shortLen))
	}
	if len(p.RolledBack) > 0 {
		f["rolled_back"] = p.RolledBack
		text += "; rolled back " + strings.Join(p.RolledBack, ", ")
	}
	if p.Outcome == string(api.ProgramOK) && len(p.Result) == 0 && p.Withheld == "" {
		text += "; it returned nothing"
	}
	if p.Withheld != "" {
		f["withheld"] = p.Withheld
		text += "; content guard withheld its result: " + oneLine(p.Withheld)
	}
	if len(p.Findings) > 0 {
		var fs []map[string]any
		var parts []string
		for _, g := range p.Findings {
			fs = append(fs, map[string]any{"rule": g.Rule, "path": g.Path, "action": g.Action})
			parts = append(parts, g.Rule+" at "+g.Path+": "+g.Action)
		}
		f["findings"] = fs
		text += "; content guard: " + strings.Join(parts, ", ")
	}
	return event{at: *p.Finished, depth: 1, typ: EventProgramFinished, run: runAt(tl, *p.Finished), fields: f, text: text}
}

// maxSourceLines is how many lines of a program's source the rendering
// shows (the JSON has it whole).
const maxSourceLines = 200

// maxSourceLine is how many characters of one source line it shows.
const maxSourceLine = 240

// numbered is the source with line numbers, for the rendering.
func numbered(src string) string {
	lines := strings.Split(strings.TrimRight(src, "\n"), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i == maxSourceLines {
			fmt.Fprintf(&b, "     … %d more lines\n", len(lines)-i)
			break
		}
		fmt.Fprintf(&b, "%4d | %s\n", i+1, clip(strings.TrimRight(l, "\r"), maxSourceLine))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
