package manifests

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
)

// Parse decodes one manifest from data without validating it (call Validate
// for that). file is used in problems only. The error, if any, is Problems.
func Parse(file string, data []byte) (*Manifest, error) {
	m, ps := parse(file, data)
	if len(ps) > 0 {
		return nil, Problems(ps)
	}
	return m, nil
}

// parse returns what could be decoded along with the problems; the manifest
// is nil only when the YAML is malformed.
func parse(file string, data []byte) (*Manifest, []Problem) {
	m := &Manifest{}
	lines, ps := DecodeYAML(file, data, m)
	if lines == nil {
		return nil, ps
	}
	if len(ps) == 0 && len(lines) <= 1 {
		// Nothing but comments, "{}" or "null": say so once rather than
		// list every required field.
		return nil, []Problem{{File: file, Line: 1, Msg: "the file declares nothing (it is empty, or holds only comments); a manifest declares a server and its tools: write them, or have `airlock manifests scan --name NAME --command CMD` write a skeleton"}}
	}
	m.File = file
	m.Lines = lines
	return m, ps
}

// Load reads, decodes and validates the manifest at path. The error, if any,
// is Problems listing everything wrong with the file.
func Load(path string) (*Manifest, error) {
	m, ps := load(path)
	if len(ps) > 0 {
		return nil, ps
	}
	return m, nil
}

// load returns the manifest, even a partly decoded one, with all of its
// problems, so that LoadFiles can still check it against the others (a
// duplicate server name is worth knowing about in the same run).
func load(path string) (*Manifest, Problems) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Problems{ReadProblem(path, err)}
	}
	m, decoded := parse(path, data)
	if m == nil {
		return nil, decoded
	}
	ps := append(Problems(decoded), WithoutDecoded(m.Validate(), decoded)...)
	sortByLine(ps)
	return m, ps
}

func sortByLine(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
}

// ReadProblem describes a file that could not be read.
func ReadProblem(path string, err error) Problem {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is already in the problem
	}
	return Problem{File: path, Msg: fmt.Sprintf("cannot read the file: %v", err)}
}

// LoadFiles loads and validates every manifest in paths, then checks them
// against each other (ValidateAll). It reports the problems of all files
// together, so one run shows everything to fix. The manifests are returned
// in the order of paths, only when there is no problem at all: a gateway
// must not start with part of its manifests.
func LoadFiles(paths []string) ([]*Manifest, error) {
	var (
		all Problems
		ms  []*Manifest
	)
	for _, p := range paths {
		m, ps := load(p)
		all = append(all, ps...)
		if m != nil {
			ms = append(ms, m)
		}
	}
	all = append(all, crossProblems(ms)...)
	if len(all) > 0 {
		return nil, all
	}
	return ms, nil
}
