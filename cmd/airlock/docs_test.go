package main

// The repository's Markdown must stand alone: every relative link in a *.md
// file names a file or folder inside the repository that exists.

import (
	"bufio"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdInline is an inline link or image, [text](target "title"); the
	// target may be wrapped in <>.
	mdInline = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// mdRefDef is a reference definition, [label]: target.
	mdRefDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// mdCodeSpan is inline code, whose brackets are not links.
	mdCodeSpan = regexp.MustCompile("`+[^`]*`+")
	// mdScheme starts an absolute URL (https:, mailto:, …).
	mdScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// mdLink is one link target found in a Markdown file, at a line.
type mdLink struct {
	line   int
	target string
}

// markdownLinks returns the link targets of a Markdown file outside fenced
// code blocks and code spans.
func markdownLinks(t *testing.T, path string) []mdLink {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var links []mdLink
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		line = mdCodeSpan.ReplaceAllString(line, "")
		for _, m := range mdInline.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{n, strings.Trim(m[1], "<>")})
		}
		if m := mdRefDef.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{n, strings.Trim(m[1], "<>")})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return links
}

// checkLink says what is wrong with a link target in the Markdown file at
// rel (relative to root), or "" when it is an absolute URL, an anchor, or a
// relative path to something inside root that exists.
func checkLink(root, rel, target string) string {
	if mdScheme.MatchString(target) || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "//") {
		return ""
	}
	p, _, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	if strings.HasPrefix(p, "/") {
		return "is an absolute path; link to a file of the repository by a path relative to this file"
	}
	in := filepath.Join(filepath.Dir(rel), filepath.FromSlash(p))
	if in == ".." || strings.HasPrefix(in, ".."+string(filepath.Separator)) {
		return "leaves the repository; name the document in plain text, or link to a file in the repository"
	}
	if _, err := os.Stat(filepath.Join(root, in)); err != nil {
		return "names " + filepath.ToSlash(in) + ", which does not exist"
	}
	return ""
}

// Every relative link in the repository's Markdown (README.md, RATIONALE.md,
// deploy/, docs/, …; node_modules aside) names a file inside the repository
// that exists: the repository is read without anything beside it.
func TestMarkdownLinksStayInRepository(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, rel := range files {
		for _, l := range markdownLinks(t, filepath.Join(root, rel)) {
			checked++
			if why := checkLink(root, rel, l.target); why != "" {
				t.Errorf("%s:%d: link %q %s", filepath.ToSlash(rel), l.line, l.target, why)
			}
		}
	}
	// The walk must have found the documents this test is about.
	for _, want := range []string{"README.md", "RATIONALE.md", filepath.Join("deploy", "README.md")} {
		found := false
		for _, f := range files {
			found = found || f == want
		}
		if !found {
			t.Errorf("%s not found under %s (found %v)", want, root, files)
		}
	}
	if checked == 0 {
		t.Errorf("no links found in %v", files)
	}
}

// checkLink itself: what it lets through and what it refuses.
func TestCheckMarkdownLink(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"README.md", filepath.Join("docs", "a b.md")} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		file, target string
		ok           bool
	}{
		{"README.md", "https://example.com/x", true},
		{"README.md", "mailto:a@example.com", true},
		{"README.md", "#layout", true},
		{"README.md", "docs/a%20b.md#top", true},
		{"docs/a b.md", "../README.md", true},
		{"docs/a b.md", ".", true},
		{"README.md", "../shared/DESIGN.md", false},
		{"docs/a b.md", "../../shared/notes/x.md", false},
		{"README.md", "..", false},
		{"README.md", "/etc/passwd", false},
		{"README.md", "docs/missing.md", false},
	} {
		why := checkLink(root, filepath.FromSlash(c.file), c.target)
		if (why == "") != c.ok {
			t.Errorf("%s: link %q: got %q, want ok=%v", c.file, c.target, why, c.ok)
		}
	}
	// Links are found outside code; inside fences and code spans they are not.
	md := filepath.Join(root, "x.md")
	text := "see [a](README.md) and `[b](nope.md)`\n```\n[c](nope.md)\n```\n[d]: docs/x.md\n![img](<docs/a b.md> \"title\")\n"
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got := markdownLinks(t, md)
	want := []mdLink{{1, "README.md"}, {5, "docs/x.md"}, {6, "docs/a b.md"}}
	if len(got) != len(want) {
		t.Fatalf("links %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("link %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
